"""Greedy parity with Hugging Face transformers on the embedded SmolLM2-135M (real weights, float32).

Eight prompts of 3..400 tokens run as ONE batch (prefill, then 64 decode steps) and must give
exactly the ids of `generate(do_sample=False)` (the prompts left-padded into one batch); then again
with each prompt split across two forward calls (the second extends over a prefix in the KV pool).
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from radixlm.model_executor.forward_batch_builder import generate_static_batch
from radixlm.model_executor.model_runner import ModelRunner
from radixlm.server_args import ServerArgs

PROMPT_LENS = [3, 12, 40, 77, 128, 201, 310, 400]
NEW_TOKENS = 64
CORPUS = """The history of computing is a story of abstractions. Early machines were programmed by
rewiring panels; then came stored programs, assemblers, and compilers. Each layer hid the one
below it, so that people could think about problems instead of circuits. Operating systems
turned a single processor into many virtual ones, and networks turned many computers into one.
def binary_search(items, target):
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1
Recipes for bread are surprisingly old. Flour, water, salt and yeast, combined in the right
proportions and given time, become a loaf whose crust crackles as it cools. Bakers speak of
hydration, fermentation and oven spring; the chemistry is subtle but the practice is simple.
Question: What is the capital of Australia, and why was it chosen over Sydney and Melbourne?
Answer: Canberra was chosen as a compromise between the two rival cities in 1908.
The mitochondria is often called the powerhouse of the cell because it produces most of the
chemical energy needed to power the cell's biochemical reactions, stored as ATP.
"""


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The CI box has 2 shared cores: one intra-op thread avoids OpenMP oversubscription (5x faster here)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def setup(smollm2_dir: str) -> tuple[ModelRunner, torch.nn.Module, list[list[int]]]:
    runner = ModelRunner(ServerArgs(model_path=smollm2_dir, device="cpu", dtype="float32",
                                    max_total_tokens=16384).resolved())
    hf = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    ids = AutoTokenizer.from_pretrained(smollm2_dir)(CORPUS * 4)["input_ids"]
    prompts = [ids[i * 37: i * 37 + n] for i, n in enumerate(PROMPT_LENS)]
    assert [len(p) for p in prompts] == PROMPT_LENS
    return runner, hf, prompts


@pytest.fixture(scope="module")
def expected(setup: tuple) -> list[list[int]]:
    """HF's greedy ids, the eight prompts left-padded into one `generate` call (half the time of eight
    calls here; the same ids as per-prompt calls on these prompts, checked when this was written)."""
    _, hf, prompts = setup
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    gen = hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=NEW_TOKENS, eos_token_id=None,
                      pad_token_id=0)
    return gen[:, width:].tolist()


def test_one_batch_prefill_then_decode_matches_hf(setup: tuple, expected: list[list[int]]) -> None:
    runner, _, prompts = setup
    assert generate_static_batch(runner, prompts, NEW_TOKENS) == expected


def test_prompt_split_over_cached_prefix_matches_hf(setup: tuple, expected: list[list[int]]) -> None:
    runner, _, prompts = setup
    split = [max(1, len(p) * 2 // 3) for p in prompts]
    assert generate_static_batch(runner, prompts, NEW_TOKENS, split_at=split) == expected
