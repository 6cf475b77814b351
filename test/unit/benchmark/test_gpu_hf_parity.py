"""benchmark/gpu_hf_parity.py on the CPU: its classification of a first difference, and a tiny end-to-end run."""

from __future__ import annotations

import pytest
import torch

from radixlm.benchmark import gpu_hf_parity as parity

V = 16


def logits_with(top: dict[int, float]) -> torch.Tensor:
    row = torch.zeros(V)
    for tok, val in top.items():
        row[tok] = val
    return row


def test_first_difference_is_classified_against_fp32_and_the_rule() -> None:
    # HF picks 3 then 5; ours picks 3 then 7. HF's second step: 5 and 7 within one bf16 step (gap 0.03125).
    hf = torch.stack([logits_with({3: 4.0}), logits_with({5: 4.03125, 7: 4.0})])
    ref = [3, 5]
    # fp32 on the same prefix: 5 and 7 differ by 0.001, far below HF's own bf16 error there -> a tie.
    noise = torch.linspace(-0.02, 0.02, V)
    fp32_tie = torch.stack([logits_with({3: 4.0}), logits_with({5: 4.011, 7: 4.01}) - noise])
    r = parity.compare_prompt(2, [3, 7], ref, hf, fp32_tie, [1.0, 0.0], torch.bfloat16, 1e-3, 3.0)
    assert (r.equal, r.first_diff, r.hf_tok, r.our_tok) == (1, 1, 5, 7)
    assert r.hf_gap == pytest.approx(0.03125) and r.our_gap == 0.0
    assert r.cls == "tie within rounding" and not r.rule_ok  # the rule is absolute: 0.031 >= 1e-3
    assert r.compared_hf_steps[1] == pytest.approx(1.0)  # one bf16 step at 4.0
    # ours picked a token HF and fp32 put a whole logit lower -> a real difference.
    hf_far = torch.stack([logits_with({3: 4.0}), logits_with({5: 5.0, 7: 4.0})])
    fp32_far = hf_far + noise / 10
    r = parity.compare_prompt(2, [3, 7], ref, hf_far, fp32_far, None, torch.bfloat16, 1e-3, 3.0)
    assert r.cls.startswith("real") and r.fp32_diff == pytest.approx(1.0, abs=0.01) and not r.rule_ok
    # an exact tie in HF's logits passes the rule whatever fp32 says
    hf_tied = torch.stack([logits_with({3: 4.0}), logits_with({5: 4.0, 7: 4.0})])
    assert parity.compare_prompt(2, [3, 7], ref, hf_tied, fp32_far, None, torch.bfloat16, 1e-3, 3.0).rule_ok
    r = parity.compare_prompt(2, ref, ref, hf, fp32_far, None, torch.bfloat16, 1e-3, 3.0)
    assert (r.cls, r.rule_ok, r.equal, len(r.compared_hf_gaps)) == ("equal", True, 2, 2)


def test_agreement_with_fp32_counts_tokens_that_are_not_the_fp32_argmax() -> None:
    l32 = torch.stack([logits_with({3: 1.0}), logits_with({4: 2.0, 5: 1.5})])
    assert parity.fp32_agreement([[3, 5]], [l32]) == (1, 2, pytest.approx(0.5))


@pytest.mark.slow
def test_tiny_llama_end_to_end_on_cpu(tmp_path, monkeypatch, capsys) -> None:
    """The whole script on a tiny Llama in fp32; one HF token is corrupted so the failure path is exercised."""
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=256, intermediate_size=512, num_attention_heads=4, num_key_value_heads=2,
                num_hidden_layers=2, vocab_size=512, max_position_embeddings=1024, tie_word_embeddings=False,
                architectures=["LlamaForCausalLM"]).save_pretrained(tmp_path)  # no tokenizer: the script writes one
    real_generate = parity.hf_generate

    def corrupted(model, prompts, new_tokens, device):
        outs, logits = real_generate(model, prompts, new_tokens, device)
        outs[1][4] = (outs[1][4] + 1) % 512  # HF "chose" a token fp32 does not prefer
        return outs, logits

    monkeypatch.setattr(parity, "hf_generate", corrupted)
    rc = parity.main(["--config", str(tmp_path), "--layers", "2", "--device", "cpu", "--dtype", "float32",
                      "--prompt-lens", "3", "40", "100", "--new-tokens", "8"])
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| ") and "prompt len" not in line]
    assert len(rows) == 3, out
    assert "| 3 | 8/8 |" in rows[0] and rows[0].endswith("| equal | pass |")
    assert "| 40 | 4/8 | 4 |" in rows[1] and "| ours | real (" in rows[1] and rows[1].endswith("| FAIL |")
    assert "| 100 | 8/8 |" in rows[2]
    assert "issue_rule: FAIL (1 of 3 prompts" in out and "fp32_check: FAIL (1 first" in out
    assert "radixlm 0/24" in out  # our own tokens are fp32's argmax everywhere (fp32 engine)
    assert "radixlm's own: median" in out  # the Engine returned its top-2 logprobs
    # the control: HF's real tokens (batched or teacher-forced) differ from the corrupted reference at 40@4
    controls = [line for line in out.splitlines() if line.startswith("hf_control (")]
    assert [c.split(")")[0] for c in controls] == ["hf_control (batched generate against per-prompt generate",
                                                  "hf_control (teacher-forced argmax against per-prompt generate"]
    for line in controls:
        assert "40@4" in line and "the issue's rule would FAIL on" in line, line
    assert rc == 1
