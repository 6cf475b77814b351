"""Benchmark datasets shared by the serving and offline benchmarks.

Every dataset yields `DatasetRow`s: a prompt as text and as token ids, its length in
tokens, and the number of output tokens to ask for. Random prompts are built from
whole-word vocabulary entries, so decoding the drawn ids and re-encoding the text gives
back the intended number of tokens (checked row by row; the row's `prompt_ids` are the
re-encoded ids, which is what a server that tokenizes the text will see).

Range-ratio styles (`--range-ratio-style`), for a target length L and ratio r, lengths are
drawn uniformly from the integers in [lo, hi]:
  sglang: lo = max(1, floor(L*r)), hi = L            (r in [0, 1]; r=0 gives U[1, L])
  vllm:   lo = max(1, floor(L*(1-r))), hi = ceil(L*(1+r))   (r in [0, 1); r=1 rejected)
The mean is (lo + hi) / 2 in both styles.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np


class Tokenizer(Protocol):
    """The slice of a Hugging Face tokenizer the datasets use (also `__call__`, `batch_decode`)."""

    def __len__(self) -> int: ...
    def encode(self, text: str, add_special_tokens: bool = ...) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class DatasetRow:
    prompt: str
    prompt_ids: list[int]
    prompt_len: int
    output_len: int


@dataclass(frozen=True)
class DatasetConfig:
    dataset_name: str = "random"
    dataset_path: str | None = None
    num_prompts: int = 100
    seed: int = 1
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    range_ratio_style: str = "sglang"
    gsp_num_groups: int = 8
    gsp_prompts_per_group: int = 16
    gsp_system_prompt_len: int = 1024
    gsp_question_len: int = 128
    gsp_output_len: int = 128
    sharegpt_output_len: int | None = None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> "DatasetConfig":
        return cls(**{name: getattr(args, name) for name in cls.__dataclass_fields__})


# ---- length samplers ---------------------------------------------------------------


def _sglang_bounds(length: int, ratio: float) -> tuple[int, int]:
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"--random-range-ratio must be in [0, 1] for the sglang style, got {ratio}")
    return max(1, math.floor(length * ratio)), length


def _vllm_bounds(length: int, ratio: float) -> tuple[int, int]:
    if not 0.0 <= ratio < 1.0:
        raise ValueError(
            f"--random-range-ratio must be in [0, 1) for the vllm style (a half-width around the "
            f"length; r=1 would allow zero-length prompts), got {ratio}"
        )
    return max(1, math.floor(length * (1 - ratio))), math.ceil(length * (1 + ratio))


RANGE_RATIO_STYLES: dict[str, Callable[[int, float], tuple[int, int]]] = {
    "sglang": _sglang_bounds,
    "vllm": _vllm_bounds,
}


def length_bounds(length: int, ratio: float, style: str) -> tuple[int, int]:
    """The inclusive [lo, hi] integer range lengths are drawn from (see module docstring)."""
    if style not in RANGE_RATIO_STYLES:
        raise ValueError(f"--range-ratio-style must be one of {sorted(RANGE_RATIO_STYLES)}, got {style!r}")
    if length < 1:
        raise ValueError(f"length must be >= 1, got {length}")
    return RANGE_RATIO_STYLES[style](length, ratio)


def sample_lengths(length: int, ratio: float, style: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n lengths drawn uniformly from the integers in `length_bounds(length, ratio, style)`."""
    lo, hi = length_bounds(length, ratio, style)
    return rng.integers(lo, hi + 1, size=n)


# ---- length-preserving random text -----------------------------------------------


class WordVocab:
    """Vocabulary entries that are whole alphabetic words w such that "w w" encodes to 2 ids.

    A prompt made of such words joined by single spaces re-encodes to one id per word for
    byte-level BPE ("w", " w") and SentencePiece ("▁w") tokenizers alike.
    """

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        pieces = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])  # type: ignore[attr-defined]
        words = {p.strip() for p in pieces}
        candidates = sorted(w for w in words if 2 <= len(w) <= 12 and w.isascii() and w.isalnum() and w[0].isalpha())
        encoded = tokenizer([f"{w} {w}" for w in candidates], add_special_tokens=False)["input_ids"]  # type: ignore[operator]
        self.words = [w for w, ids in zip(candidates, encoded) if len(ids) == 2]
        if len(self.words) < 100:
            raise ValueError(f"tokenizer has only {len(self.words)} single-token words; cannot build random prompts")

    def text(self, num_tokens: int, rng: np.random.Generator) -> str:
        picks = rng.integers(0, len(self.words), size=num_tokens)
        return " ".join(self.words[i] for i in picks)

    def row(self, prefix: str, num_tokens: int, output_len: int, rng: np.random.Generator) -> DatasetRow:
        """`prefix` (may be empty) + num_tokens random words; retries until the length holds."""
        target = len(self.encode(prefix)) + num_tokens
        for _ in range(8):
            body = self.text(num_tokens, rng)
            prompt = f"{prefix} {body}" if prefix else body
            ids = self.encode(prompt)
            if len(ids) == target:
                return DatasetRow(prompt, ids, len(ids), output_len)
        raise ValueError(f"could not build a prompt that re-encodes to {target} tokens")

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) if text else []


# ---- datasets ----------------------------------------------------------------------


def sample_random(config: DatasetConfig, tokenizer: Tokenizer) -> list[DatasetRow]:
    rng = np.random.default_rng(config.seed)
    style, ratio, n = config.range_ratio_style, config.random_range_ratio, config.num_prompts
    input_lens = sample_lengths(config.random_input_len, ratio, style, n, rng)
    output_lens = sample_lengths(config.random_output_len, ratio, style, n, rng)
    vocab = WordVocab(tokenizer)
    return [vocab.row("", int(i), int(o), rng) for i, o in zip(input_lens, output_lens)]


def sample_generated_shared_prefix(config: DatasetConfig, tokenizer: Tokenizer) -> list[DatasetRow]:
    """gsp_num_groups system prompts, each followed by gsp_prompts_per_group questions.

    The request count is groups x prompts per group (`--num-prompts` does not apply); rows
    are shuffled with the seed so a group's requests interleave with other groups'.
    """
    rng = np.random.default_rng(config.seed)
    vocab = WordVocab(tokenizer)
    rows = []
    for _ in range(config.gsp_num_groups):
        system_prompt = vocab.text(config.gsp_system_prompt_len, rng)
        for _ in range(config.gsp_prompts_per_group):
            rows.append(vocab.row(system_prompt, config.gsp_question_len, config.gsp_output_len, rng))
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def sample_sharegpt(config: DatasetConfig, tokenizer: Tokenizer) -> list[DatasetRow]:
    """First human turn as the prompt; the first reply's token count as the output length.

    Read from a local JSON file (`--dataset-path`; nothing is downloaded). Pairs with a
    prompt or reply under 4 tokens, a prompt over 1024 or a total over 2048 are skipped.
    """
    if not config.dataset_path:
        raise ValueError("--dataset-path is required for the sharegpt dataset (a local JSON file)")
    with open(config.dataset_path, encoding="utf-8") as f:
        conversations = [c.get("conversations", c.get("conversation", [])) for c in json.load(f)]
    pairs = [(c[0]["value"], c[1]["value"]) for c in conversations if len(c) >= 2]
    order = np.random.default_rng(config.seed).permutation(len(pairs))
    rows = []
    for index in order:
        prompt, reply = pairs[index]
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        output_len = config.sharegpt_output_len or len(tokenizer.encode(reply, add_special_tokens=False))
        if len(ids) < 4 or output_len < 4 or len(ids) > 1024 or len(ids) + output_len > 2048:
            continue
        rows.append(DatasetRow(prompt, ids, len(ids), output_len))
        if len(rows) == config.num_prompts:
            break
    return rows


def sample_custom(config: DatasetConfig, tokenizer: Tokenizer) -> list[DatasetRow]:
    """JSONL of token ids: one `{"input_ids": [...], "output_len": N}` per line.

    `prompt_ids` is accepted for `input_ids` and `max_tokens` for `output_len`. The first
    `--num-prompts` lines are used, in file order.
    """
    if not config.dataset_path:
        raise ValueError("--dataset-path is required for the custom dataset (a token-id JSONL file)")
    rows = []
    with open(config.dataset_path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            ids = record.get("input_ids", record.get("prompt_ids"))
            output_len = record.get("output_len", record.get("max_tokens"))
            if not ids or not output_len:
                raise ValueError(f"{config.dataset_path}:{line_no}: needs input_ids and output_len")
            rows.append(DatasetRow(tokenizer.decode(ids), list(ids), len(ids), int(output_len)))
            if len(rows) == config.num_prompts:
                break
    return rows


DATASETS: dict[str, Callable[[DatasetConfig, Tokenizer], list[DatasetRow]]] = {
    "random": sample_random,
    "generated-shared-prefix": sample_generated_shared_prefix,
    "sharegpt": sample_sharegpt,
    "custom": sample_custom,
}


def get_dataset(config: DatasetConfig, tokenizer: Tokenizer) -> list[DatasetRow]:
    if config.dataset_name not in DATASETS:
        raise ValueError(f"--dataset-name must be one of {sorted(DATASETS)}, got {config.dataset_name!r}")
    rows = DATASETS[config.dataset_name](config, tokenizer)
    if not rows:
        raise ValueError(f"dataset {config.dataset_name!r} produced no prompts")
    return rows


def add_dataset_args(parser: argparse.ArgumentParser) -> None:
    """The dataset flags, shared by every benchmark that draws prompts."""
    defaults = DatasetConfig()
    group = parser.add_argument_group("dataset")
    group.add_argument("--dataset-name", "--dataset", dest="dataset_name", choices=sorted(DATASETS), default=defaults.dataset_name)
    group.add_argument("--dataset-path", default=None, help="local ShareGPT JSON or custom token-id JSONL")
    group.add_argument("--num-prompts", type=int, default=defaults.num_prompts)
    group.add_argument("--seed", type=int, default=defaults.seed)
    group.add_argument("--random-input-len", type=int, default=defaults.random_input_len)
    group.add_argument("--random-output-len", type=int, default=defaults.random_output_len)
    group.add_argument("--random-range-ratio", type=float, default=defaults.random_range_ratio)
    group.add_argument("--range-ratio-style", choices=sorted(RANGE_RATIO_STYLES), default=defaults.range_ratio_style,
                       help="sglang: U[max(1,floor(L*r)), L]; vllm: U[floor(L*(1-r)), ceil(L*(1+r))], r<1")
    group.add_argument("--gsp-num-groups", type=int, default=defaults.gsp_num_groups)
    group.add_argument("--gsp-prompts-per-group", type=int, default=defaults.gsp_prompts_per_group)
    group.add_argument("--gsp-system-prompt-len", type=int, default=defaults.gsp_system_prompt_len)
    group.add_argument("--gsp-question-len", type=int, default=defaults.gsp_question_len)
    group.add_argument("--gsp-output-len", type=int, default=defaults.gsp_output_len)
    group.add_argument("--sharegpt-output-len", type=int, default=None, help="override each reply's length")
