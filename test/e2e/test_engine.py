"""radixlm.Engine end to end: real SmolLM2, real scheduler and detokenizer processes.

One engine per configuration (module scope) keeps the suite fast on 2 cores; after every
test the scheduler's idle leak check must pass (`memory_leak` in get_server_info).
"""

from __future__ import annotations

import random
from typing import Iterator

import pytest

import radixlm

pytestmark = pytest.mark.slow

PROMPTS = [
    "The capital of France is",
    "Write a haiku about the sea.",
    "def fibonacci(n):\n    ",
    "List three colors: red,",
    "Once upon a time, in a land far away, there lived a dragon who loved to read books about",
    "1, 2, 3, 4, 5,",
    "Translate to French: Good morning, my friend.",
    "Q: What is the boiling point of water in Celsius?\nA:",
]
MAX_NEW = [12, 5, 16, 3, 9, 14, 7, 10]  # staggered finishes
ENGINE_KW = dict(max_total_tokens=12000, log_level="warning")


def greedy(max_new: int) -> dict:
    return {"max_new_tokens": max_new, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def engine() -> Iterator[radixlm.Engine]:
    with radixlm.Engine(**ENGINE_KW) as eng:
        yield eng


@pytest.fixture(autouse=True)
def leak_check(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "engine" in request.fixturenames:
        info = request.getfixturevalue("engine").get_server_info()
        assert not info["memory_leak"], info["memory_leak_message"]
        assert info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0


@pytest.fixture(scope="module")
def hf_outputs(smollm2_dir: str) -> list[list[int]]:
    import torch
    from transformers import AutoModelForCausalLM

    from radixlm.model_loader.tokenizer import get_tokenizer

    tok = get_tokenizer(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, torch_dtype=torch.float32).eval()
    outs = []
    with torch.inference_mode():
        for prompt, n in zip(PROMPTS, MAX_NEW):
            ids = torch.tensor([tok.encode(prompt)])
            gen = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
            outs.append(gen[0, ids.shape[1]:].tolist())
    return outs


def run_prompts(eng: radixlm.Engine) -> list[list[int]]:
    outs = eng.generate(PROMPTS, [greedy(n) for n in MAX_NEW])
    assert [o["meta_info"]["completion_tokens"] for o in outs] == MAX_NEW
    return [o["output_ids"] for o in outs]


def test_greedy_batch_matches_hf(engine: radixlm.Engine, hf_outputs: list[list[int]]) -> None:
    assert run_prompts(engine) == hf_outputs


def test_cached_tokens_are_token_granular(engine: radixlm.Engine) -> None:
    rng = random.Random(0)
    ids = [rng.randrange(1000, 40000) for _ in range(1100)]
    assert engine.flush_cache()
    cached = []
    for n in (100, 1000, 1000, 500, 1100):
        out = engine.generate(input_ids=ids[:n], sampling_params={"max_new_tokens": 1, "temperature": 0})
        cached.append(out["meta_info"]["cached_tokens"])
    assert cached == [0, 100, 999, 499, 1000]
    assert engine.get_server_info()["cache_hit_rate"] > 0.5


@pytest.mark.parametrize("flags", [{"chunked_prefill_size": 64}, {"disable_radix_cache": True},
                                   {"disable_overlap_schedule": True}],
                         ids=["chunked64", "no-radix", "no-overlap"])
def test_engine_variants_give_same_outputs(flags: dict, hf_outputs: list[list[int]]) -> None:
    with radixlm.Engine(**ENGINE_KW, **flags) as eng:
        assert run_prompts(eng) == hf_outputs
        long_prompt = " ".join(PROMPTS) * 4  # > 64 tokens: several chunks, twice (second time cached)
        first = eng.generate(long_prompt, greedy(6))
        second = eng.generate(long_prompt, greedy(6))
        assert first["output_ids"] == second["output_ids"]
        info = eng.get_server_info()
        assert not info["memory_leak"], info["memory_leak_message"]


def test_n_samples_share_prefill_and_differ(engine: radixlm.Engine) -> None:
    outs = engine.generate("Tell me a story about a cat.", {"n": 4, "max_new_tokens": 12, "temperature": 1.0})
    assert len(outs) == 4
    assert len({tuple(o["output_ids"]) for o in outs}) > 1
    assert all(o["meta_info"]["cached_tokens"] > 0 for o in outs)
    seeded = [engine.generate("Pick a number:", {"n": 2, "max_new_tokens": 6, "temperature": 1.0, "seed": 7})
              for _ in range(2)]
    assert [o["output_ids"] for o in seeded[0]] == [o["output_ids"] for o in seeded[1]]


@pytest.mark.parametrize("kwargs,name", [
    (dict(prompt=""), "prompt is empty"),
    (dict(input_ids=[]), "prompt is empty"),
    (dict(prompt="hi " * 9000), "context length"),
    (dict(prompt="hi", sampling_params={"max_new_tokens": -1}), "max_new_tokens"),
    (dict(prompt="hi", sampling_params={"top_p": 0}), "top_p"),
    (dict(prompt="hi", sampling_params={"top_p": 1.2}), "top_p"),
    (dict(prompt="hi", sampling_params={"bogus_key": 1}), "bogus_key"),
    (dict(prompt="hi", sampling_params={"max_new_tokens": 9000}), "max_new_tokens"),
])
def test_bad_input_is_named_and_engine_keeps_serving(engine: radixlm.Engine, kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        engine.generate(**kwargs)
    assert engine.generate("Hello", greedy(2))["meta_info"]["completion_tokens"] == 2


def test_stream_increments_add_up(engine: radixlm.Engine) -> None:
    full = engine.generate(PROMPTS[4], greedy(10))
    chunks = list(engine.generate(PROMPTS[4], greedy(10), stream=True))
    assert len(chunks) > 1
    assert "".join(c["text"] for c in chunks) == full["text"]
    assert sum((c["output_ids"] for c in chunks), []) == full["output_ids"]
    assert chunks[-1]["meta_info"]["finish_reason"] == {"type": "length", "length": 10}


def test_stop_conditions(engine: radixlm.Engine) -> None:
    base = engine.generate(PROMPTS[5], greedy(14))
    ids, text = base["output_ids"], base["text"]
    out = engine.generate(PROMPTS[5], {**greedy(14), "stop_token_ids": [ids[3]]})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": ids[3]}
    assert out["output_ids"] == ids[:ids.index(ids[3]) + 1]
    stop = text.strip().split()[2]
    out = engine.generate(PROMPTS[5], {**greedy(14), "stop": stop})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": stop}
    assert out["text"] == text[:text.find(stop)]
    out = engine.generate(PROMPTS[5], {**greedy(14), "stop": stop, "no_stop_trim": True})
    assert out["text"].endswith(stop)


def test_logprobs(engine: radixlm.Engine) -> None:
    out = engine.generate(PROMPTS[0], greedy(4), return_logprob=True, logprob_start_len=0, top_logprobs_num=2,
                          return_text_in_logprobs=True)
    meta = out["meta_info"]
    assert [t for _, t, _ in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(lp <= 0 for lp, _, _ in meta["output_token_logprobs"])
    assert len(meta["input_token_logprobs"]) == meta["prompt_tokens"] and meta["input_token_logprobs"][0][0] is None
    assert all(len(top) == 2 and top[0][1] == tok for top, (_, tok, _) in
               zip(meta["output_top_logprobs"], meta["output_token_logprobs"]))


def test_async_generate_and_server_info(engine: radixlm.Engine) -> None:
    import asyncio

    async def run() -> list[dict]:
        return await asyncio.gather(*[engine.async_generate(p, greedy(3)) for p in PROMPTS[:3]])

    outs = asyncio.run(run())
    assert [o["meta_info"]["completion_tokens"] for o in outs] == [3, 3, 3]
    info = engine.get_server_info()
    for key in ("num_running_reqs", "num_waiting_reqs", "token_usage", "cache_hit_rate", "max_total_num_tokens"):
        assert key in info
