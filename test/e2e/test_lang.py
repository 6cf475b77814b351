"""The frontend language end to end: the examples against the Engine and a real server.

    timeout 3000 python -m pytest -q test/e2e/test_lang.py
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

import radixlm as rl
from radixlm.lang import ProgramError

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def load_example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"lang_example_{name}", REPO_ROOT / "examples" / "lang" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", params=["engine", "server"])
def backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The Engine, then the shared HTTP server (`http_server` from test/e2e/conftest.py, started
    only when the server group begins, after the Engine is shut down)."""
    if request.param == "engine":
        backend = rl.EngineBackend()
        yield backend
        backend.shutdown()
    else:
        server = request.getfixturevalue("http_server")
        yield rl.RuntimeEndpoint(server.base_url, api_key=server.api_key)


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: str) -> Any:
    from radixlm.model_loader.tokenizer import get_tokenizer

    return get_tokenizer(smollm2_dir)


def test_few_shot_run_batch_computes_the_prefix_once(backend, tokenizer) -> None:
    ex = load_example("few_shot_qa")
    prefix_len = len(tokenizer.encode(ex.FEW_SHOT))
    assert backend.flush_cache()
    states = ex.few_shot_qa.run_batch([{"question": q} for q in ex.QUESTIONS], backend=backend)
    assert len(states) == 16 and all(s.error() is None for s in states)
    for state in states:
        assert isinstance(state["answer"], str) and "\n" not in state["answer"]  # stopped at its stop string
        assert state.text().endswith("\nA:" + state["answer"])
    cached = [s.get_meta_info("answer")["cached_tokens"] for s in states]
    assert sum(cached) >= 15 * prefix_len, (cached, prefix_len)


def test_fork_branches_hit_the_shared_prefix(backend) -> None:
    ex = load_example("tips_fork_join")
    state = ex.tips.run(topic="staying healthy", backend=backend)
    tips = state["detailed_tip"]
    assert isinstance(tips, list) and len(tips) == 2 and all(isinstance(t, str) for t in tips)
    assert all("\n\n" not in t for t in tips)
    assert "Tip 1: " + tips[0] in state.text() and isinstance(state["summary"], str)
    prefix_tokens = state.stream_executor.fork_prefix_meta["prompt_tokens"]
    metas = state.get_meta_info("detailed_tip")
    assert len(metas) == 2
    for meta in metas:
        assert meta["cached_tokens"] >= prefix_tokens, (meta, prefix_tokens)


def test_multi_turn_chat_streams_and_records_messages(backend) -> None:
    ex = load_example("multi_turn_chat")
    state = ex.multi_turn_chat.run(question_1="What is 1+1?", question_2="And 2+2?", backend=backend,
                                   stream=True)
    streamed = "".join(state.text_iter())
    assert streamed == state.text() and state.error() is None
    messages = state.messages()
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == state["answer_1"] and messages[4]["content"] == state["answer_2"]
    assert messages[3]["content"] == "And 2+2?"
    template = backend.get_chat_template()
    assert state.text().endswith(template.prefix("assistant") + state["answer_2"] + template.suffix("assistant"))


@pytest.mark.parametrize("method", ["token_length_normalized", "greedy_token_selection",
                                    "unconditional_likelihood_normalized"])
def test_select_classifier_picks_a_label(backend, method: str) -> None:
    ex = load_example("select_classifier")
    states = ex.classify.run_batch([{"review": r, "method": getattr(rl, method)} for r in ex.REVIEWS[:2]],
                                   backend=backend)
    for state in states:
        assert state["sentiment"] in ex.LABELS
        assert state.text().endswith("Sentiment: " + state["sentiment"] + backend.get_chat_template().suffix("assistant"))
        meta = state.get_meta_info("sentiment")
        assert len(meta["normalized_prompt_logprobs"]) == len(ex.LABELS)


def test_one_failing_program_does_not_stop_the_batch(backend) -> None:
    @rl.function
    def maybe_fail(s, i: int) -> None:
        s += f"Count to three: {i}," + rl.gen("next", max_tokens=3, temperature=0)
        if i == 5:
            raise ValueError(f"program {i} failed on purpose")
        s += rl.gen("more", max_tokens=2, temperature=0)

    states = maybe_fail.run_batch([{"i": i} for i in range(8)], backend=backend)
    assert isinstance(states[5].error(), ValueError) and "on purpose" in str(states[5].error())
    assert isinstance(states[5]["next"], str)  # produced before the failure
    with pytest.raises(ProgramError):
        states[5]["more"]
    for i, state in enumerate(states):
        if i != 5:
            assert state.error() is None and isinstance(state["more"], str)


def test_regex_extraction(backend) -> None:
    import re

    ex = load_example("regex_extraction")
    try:
        state = ex.extract.run(text=ex.TEXT, backend=backend)
    except Exception as e:  # noqa: BLE001
        if "regex" in str(e).lower() or "grammar" in str(e).lower():
            pytest.skip(f"the server does not support regex yet: {e}")
        raise
    for field, regex in ex.FIELDS.items():
        assert re.fullmatch(regex, state[field]), f"{field}={state[field]!r} does not match {regex!r}: is regex applied?"


def test_select_agrees_with_brute_force_logprobs(backend, tokenizer) -> None:
    """Score each choice with its own full-prompt request and our tokenization; compare."""
    if not isinstance(backend, rl.EngineBackend):
        pytest.skip("the brute force runs through the Engine")
    ex = load_example("select_classifier")
    choices = ["positive", "negative", "neutral", "mixed feelings"]

    @rl.function
    def classify(s, review: str) -> None:
        s += rl.user(f"Is the sentiment of this review positive or negative?\nReview: {review}")
        s += rl.assistant("Sentiment:" + rl.select("sentiment", choices=[" " + c for c in choices]))

    state = classify.run(review=ex.REVIEWS[1], backend=backend)
    prefix = state.text()[: -len(state["sentiment"] + backend.get_chat_template().suffix("assistant"))]
    expected = [_mean_choice_logprob(backend.engine, tokenizer, prefix, " " + c) for c in choices]
    got = state.get_meta_info("sentiment")["normalized_prompt_logprobs"]
    assert got == pytest.approx(expected, abs=2e-3)
    assert state["sentiment"] == " " + choices[max(range(len(choices)), key=expected.__getitem__)]


def _mean_choice_logprob(engine: Any, tokenizer: Any, prefix: str, choice: str) -> float:
    prefix_ids, full_ids = tokenizer.encode(prefix), tokenizer.encode(prefix + choice)
    start = next(i for i, (a, b) in enumerate(zip(prefix_ids + [None], full_ids)) if a != b)
    out = engine.generate(input_ids=full_ids, sampling_params={"max_new_tokens": 0}, return_logprob=True,
                          logprob_start_len=0)
    logprobs = [e[0] for e in out["meta_info"]["input_token_logprobs"]]
    assert len(logprobs) == len(full_ids)
    return sum(logprobs[start:]) / (len(full_ids) - start)
