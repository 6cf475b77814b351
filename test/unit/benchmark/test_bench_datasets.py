"""benchmark/datasets.py: range-ratio styles, length-preserving prompts, file datasets."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from radixlm.benchmark.datasets import DatasetConfig, get_dataset, length_bounds, sample_lengths


@pytest.mark.parametrize(
    "style,length,ratio,bounds",
    [
        ("sglang", 1000, 0.0, (1, 1000)),
        ("sglang", 1000, 0.5, (500, 1000)),
        ("sglang", 4096, 1.0, (4096, 4096)),
        ("sglang", 333, 0.3, (99, 333)),
        ("vllm", 1000, 0.0, (1000, 1000)),
        ("vllm", 1000, 0.5, (500, 1500)),
        ("vllm", 333, 0.3, (233, 433)),  # floor(233.1), ceil(432.9)
        ("vllm", 10, 0.99, (1, 20)),  # lo clipped to 1
    ],
)
def test_range_ratio_bounds_and_means(style: str, length: int, ratio: float, bounds: tuple[int, int]) -> None:
    assert length_bounds(length, ratio, style) == bounds
    samples = sample_lengths(length, ratio, style, 10_000, np.random.default_rng(0))
    assert samples.min() >= bounds[0] and samples.max() <= bounds[1]
    assert samples.mean() == pytest.approx((bounds[0] + bounds[1]) / 2, rel=0.02)


def test_vllm_style_rejects_ratio_one() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\) for the vllm style"):
        length_bounds(1024, 1.0, "vllm")
    with pytest.raises(ValueError, match="sglang"):
        length_bounds(1024, 1.5, "sglang")
    with pytest.raises(ValueError, match="--range-ratio-style"):
        length_bounds(1024, 0.5, "lmdeploy")


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: str):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


def test_random_prompts_keep_their_length_after_decode_and_encode(tokenizer) -> None:
    config = DatasetConfig(num_prompts=50, random_input_len=300, random_output_len=20, random_range_ratio=0.2)
    rows = get_dataset(config, tokenizer)
    expected = sample_lengths(300, 0.2, "sglang", 50, np.random.default_rng(config.seed))
    assert [r.prompt_len for r in rows] == list(expected)
    for row in rows:
        assert tokenizer.encode(row.prompt, add_special_tokens=False) == row.prompt_ids
        assert tokenizer.encode(tokenizer.decode(row.prompt_ids), add_special_tokens=False) == row.prompt_ids
        assert 1 <= row.output_len <= 20


def test_generated_shared_prefix(tokenizer) -> None:
    config = DatasetConfig(dataset_name="generated-shared-prefix", gsp_num_groups=3, gsp_prompts_per_group=4,
                           gsp_system_prompt_len=64, gsp_question_len=16, gsp_output_len=8)
    rows = get_dataset(config, tokenizer)
    assert len(rows) == 12 and all(r.prompt_len == 80 and r.output_len == 8 for r in rows)
    prefixes = {tuple(r.prompt_ids[:64]) for r in rows}
    assert len(prefixes) == 3


def test_sharegpt_and_custom_files(tokenizer, tmp_path: Path) -> None:
    convs = [{"conversations": [{"from": "human", "value": f"Tell me about the number {i} please"},
                                {"from": "gpt", "value": "It is a number that comes after another one."}]}
             for i in range(10)] + [{"conversations": [{"from": "human", "value": "hi"}]}]
    sharegpt = tmp_path / "sharegpt.json"
    sharegpt.write_text(json.dumps(convs))
    rows = get_dataset(DatasetConfig(dataset_name="sharegpt", dataset_path=str(sharegpt), num_prompts=5), tokenizer)
    assert len(rows) == 5 and all(r.output_len > 4 and "number" in r.prompt for r in rows)

    custom = tmp_path / "custom.jsonl"
    custom.write_text("\n".join(json.dumps({"input_ids": [100 + i, 200, 300], "output_len": 7}) for i in range(4)))
    rows = get_dataset(DatasetConfig(dataset_name="custom", dataset_path=str(custom), num_prompts=3), tokenizer)
    assert [r.prompt_ids[0] for r in rows] == [100, 101, 102] and rows[0].output_len == 7
    with pytest.raises(ValueError, match="--dataset-path"):
        get_dataset(DatasetConfig(dataset_name="custom"), tokenizer)
