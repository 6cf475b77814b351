"""On CUDA: the layers' kernel path (radixlm_kernel) against their torch path, and tiny-model parity
with transformers through both attention backends. Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen3Config

from radixlm.layers.activation import SiluAndMul
from radixlm.layers.kernel_dispatch import kernel_for
from radixlm.layers.layernorm import RMSNorm
from radixlm.layers.rotary_embedding import RotaryEmbedding

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def test_kernels_are_used_on_cuda() -> None:
    assert kernel_for(torch.zeros(1, device="cuda")) is not None
    assert kernel_for(torch.zeros(1)) is None


@pytest.mark.parametrize("dtype", DTYPES)
def test_rmsnorm_kernel_matches_torch(dtype: torch.dtype) -> None:
    norm = RMSNorm(4096, 1e-5).cuda().to(dtype)
    norm.weight.data.normal_()
    x, res = torch.randn(37, 4096, device="cuda", dtype=dtype), torch.randn(37, 4096, device="cuda", dtype=dtype)
    tol = TOL[dtype]
    torch.testing.assert_close(norm(x), norm.forward_native(x), rtol=tol, atol=tol)
    want_res = x + res
    out, new_res = norm(x.clone(), res.clone())
    torch.testing.assert_close(new_res, want_res, rtol=tol, atol=tol)
    torch.testing.assert_close(out, norm.forward_native(want_res), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_kernel_matches_torch(dtype: torch.dtype) -> None:
    x = torch.randn(19, 2 * 1000, device="cuda", dtype=dtype)
    torch.testing.assert_close(SiluAndMul()(x), SiluAndMul.forward_native(x), rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("neox", [True, False])
def test_rotary_kernel_matches_torch(dtype: torch.dtype, neox: bool) -> None:
    rope = RotaryEmbedding(128, 128, 4096, 500000.0, neox,
                           {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 1024}).cuda()
    pos = torch.randint(0, 4096, (23,), device="cuda")
    q, k = torch.randn(23, 32 * 128, device="cuda", dtype=dtype), torch.randn(23, 8 * 128, device="cuda", dtype=dtype)
    want_q, want_k = rope.forward_native(pos, q.clone(), k.clone())
    got_q, got_k = rope(pos, q.clone(), k.clone())
    torch.testing.assert_close(got_q, want_q, rtol=TOL[dtype], atol=TOL[dtype])
    torch.testing.assert_close(got_k, want_k, rtol=TOL[dtype], atol=TOL[dtype])


COMMON = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, vocab_size=512, max_position_embeddings=1024)


@pytest.mark.parametrize("backend", ["torch_native", "triton"])
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_tiny_model_greedy_parity_on_cuda(kind: str, backend: str, tmp_path) -> None:
    from radixlm.model_executor.forward_batch_builder import generate_static_batch
    from radixlm.model_executor.model_runner import ModelRunner
    from radixlm.server_args import ServerArgs

    cfg = (LlamaConfig(**COMMON, architectures=["LlamaForCausalLM"]) if kind == "llama"
           else Qwen3Config(**COMMON, head_dim=32, architectures=["Qwen3ForCausalLM"]))
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    hf.save_pretrained(str(tmp_path))
    hf = hf.cuda()
    runner = ModelRunner(ServerArgs(model_path=str(tmp_path), device="cuda", dtype="float32", max_total_tokens=8192,
                                    attention_backend=backend).resolved())
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (3, 40, 129, 300)]
    expected = [hf.generate(torch.tensor([p], device="cuda"), do_sample=False, max_new_tokens=16,
                            eos_token_id=None, pad_token_id=0)[0, len(p):].tolist() for p in prompts]
    assert generate_static_batch(runner, prompts, 16) == expected
    assert generate_static_batch(runner, prompts, 16, split_at=[1, 20, 100, 150]) == expected


@pytest.mark.parametrize("graphs", [True, False])
def test_shared_prefix_decode_matches_hf(graphs: bool, tmp_path) -> None:
    """20 requests whose rows share one 300-token prefix's KV slots (as radix-cache hits do) decode
    through the cascade path (eager, and in a CUDA graph padded to 24), fed HF's greedy tokens: the
    logits of every step match HF's (float32; the Triton dots run in tf32) and the plain path's."""
    from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder
    from radixlm.model_executor.model_runner import ModelRunner
    from radixlm.server_args import ServerArgs

    cfg = LlamaConfig(**COMMON, architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    hf.save_pretrained(str(tmp_path))
    hf = hf.cuda()
    runner = ModelRunner(ServerArgs(model_path=str(tmp_path), device="cuda", dtype="float32", max_total_tokens=8192,
                                    attention_backend="triton", disable_cuda_graph=not graphs).resolved())
    g = torch.Generator().manual_seed(2)
    prefix = torch.randint(0, 512, (300,), generator=g).tolist()
    own = [torch.randint(0, 512, (1 + i % 5,), generator=g).tolist() for i in range(20)]
    steps = 8
    hf_tokens, hf_logits = [], []
    for o in own:
        ids = torch.tensor([prefix + o], device="cuda")
        seq = hf.generate(ids, do_sample=False, max_new_tokens=steps, eos_token_id=None, pad_token_id=0)
        hf_tokens.append(seq[0, ids.shape[1]:])
        hf_logits.append(hf(seq).logits[0, ids.shape[1] - 1:-1].float())  # the logits that chose each token

    def decode(cascade: bool) -> torch.Tensor:
        runner.attn_backend.cascade_enabled = cascade
        builder = ForwardBatchBuilder.for_runner(runner)
        rows = runner.req_to_token_pool.alloc(20)
        runner.forward(builder.extend(rows[:1], [0], [prefix]))
        table = runner.req_to_token_pool.req_to_token
        for row in rows[1:]:
            runner.req_to_token_pool.write(row, 0, table[rows[0], :300].long())
        fb = builder.extend(rows, [300] * 20, own)
        logits = [runner.forward_logits(fb).next_token_logits.float().clone()]  # a replay reuses its output
        for t in range(1, steps):  # teacher-forced with HF's tokens: no divergence to chase
            fb = builder.decode_next(fb, torch.stack([tok[t - 1] for tok in hf_tokens]))
            logits.append(runner.forward_logits(fb).next_token_logits.float().clone())
            if not graphs:
                assert (runner.attn_backend.forward_metadata.cascade is not None) == cascade
        return torch.stack(logits, dim=1)  # [20, steps, vocab]

    with_cascade = decode(True)  # the graphs were captured with the cascade on (the default)
    torch.testing.assert_close(with_cascade, torch.stack(hf_logits), atol=2e-2, rtol=2e-2)
    if not graphs:
        torch.testing.assert_close(with_cascade, decode(False), atol=2e-3, rtol=2e-3)
