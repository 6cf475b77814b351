"""benchmark/gpu_tp_parity.py end to end on the CPU: TP=1 and TP=2 (gloo) Engines on one saved random
tiny Llama agree token for token, and the script reports PASS (the script the two-GPU run uses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from radixlm.benchmark import gpu_tp_parity


@pytest.mark.slow
def test_tp2_matches_tp1_on_a_saved_random_model(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
                num_hidden_layers=2, vocab_size=512, max_position_embeddings=512,
                architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)
    rc = gpu_tp_parity.main(["--config", str(tmp_path), "--device", "cpu", "--dtype", "float32", "--tp-size", "2",
                             "--prompt-lens", "5", "40", "--new-tokens", "6"])
    out = capsys.readouterr().out
    assert "TP=1 vs TP=2" in out
    assert "| 5 | 6/6 | - |" in out and "| 40 | 6/6 | - |" in out
    assert "tp_parity: PASS" in out and rc == 0


def test_first_difference() -> None:
    assert gpu_tp_parity.first_difference([1, 2, 3], [1, 2, 3]) is None
    assert gpu_tp_parity.first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert gpu_tp_parity.first_difference([1, 2], [1, 2, 3]) == 2
