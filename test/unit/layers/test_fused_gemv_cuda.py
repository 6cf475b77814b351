"""On CUDA: the fused small-batch GEMV path of the layers (norm / SiLU-and-mul folded into the projection,
final norm into the LM head) against the unfused path, in eager mode, in a CUDA graph, and through tiny
Llama / Qwen2 / Qwen3 models; each test for both implementations, the Triton one (`radixlm_kernel.gemv`)
and the CUDA C++ one (`radixlm_kernel.cuda_gemv`, bf16 only). Skipped without a GPU."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from radixlm.layers import kernel_dispatch
from radixlm.layers.activation import silu_and_mul
from radixlm.layers.layernorm import RMSNorm
from radixlm.layers.linear import MergedColumnParallelLinear, QKVParallelLinear, RowParallelLinear
from radixlm.layers.logits_processor import LogitsProcessor
from radixlm.layers.vocab_parallel_embedding import ParallelLMHead
from radixlm_kernel import cuda_gemv

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: {"atol": 1e-4, "rtol": 1e-4}, torch.bfloat16: {"atol": 3e-2, "rtol": 2e-2}}
HIDDEN, INTER, VOCAB = 512, 1000, 1200


@pytest.fixture(autouse=True, params=["triton", "cuda"])
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Turns one implementation on for the test (the Triton one is off by default: it measured slower than
    cuBLAS on the H200); the CUDA one is skipped where its extension cannot be built."""
    if request.param == "cuda":
        monkeypatch.setattr(kernel_dispatch, "FUSED_GEMV_MAX_TOKENS", 0)
        monkeypatch.setattr(kernel_dispatch, "CUDA_GEMV_MAX_TOKENS", 8)
        if not kernel_dispatch.prepare_cuda_gemv(torch.bfloat16):
            pytest.skip(f"CUDA GEMV extension unavailable: {cuda_gemv.load_error}")
    else:
        monkeypatch.setattr(kernel_dispatch, "FUSED_GEMV_MAX_TOKENS", 16)
        monkeypatch.setattr(kernel_dispatch, "CUDA_GEMV_MAX_TOKENS", 0)
    return request.param


def skip_unsupported(impl: str, dtype: torch.dtype) -> None:
    if impl == "cuda" and dtype != torch.bfloat16:
        pytest.skip("the CUDA GEMVs take bfloat16 only")


@pytest.fixture
def fused_off(monkeypatch: pytest.MonkeyPatch):
    """Call `fused_off()` inside a test to make every layer take the unfused path from then on."""
    def off() -> None:
        monkeypatch.setattr(kernel_dispatch, "FUSED_GEMV_MAX_TOKENS", 0)
        monkeypatch.setattr(kernel_dispatch, "CUDA_GEMV_MAX_TOKENS", 0)
    return off


class Block(torch.nn.Module):
    """One decoder layer's projections and norms, without attention (o_proj takes a stand-in input)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.qkv = QKVParallelLinear(HIDDEN, 64, 8, 2, bias=True)
        self.o_proj = RowParallelLinear(512, HIDDEN, bias=True)
        self.gate_up = MergedColumnParallelLinear(HIDDEN, [INTER, INTER])
        self.down = RowParallelLinear(INTER, HIDDEN, bias=True)
        self.norm1, self.norm2, self.final = RMSNorm(HIDDEN, 1e-5), RMSNorm(HIDDEN, 1e-5), RMSNorm(HIDDEN, 1e-6)
        self.lm_head = ParallelLMHead(VOCAB, HIDDEN)
        self.logits = LogitsProcessor(VOCAB)
        torch.manual_seed(0)
        for p in self.parameters():
            p.data.normal_(1.0 if p.dim() == 1 else 0.0, 0.1 if p.dim() == 1 else p.shape[-1] ** -0.5)
        self.cuda().to(dtype)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> list[torch.Tensor]:
        """Every intermediate; inputs are cloned where the unfused CUDA norm would overwrite them."""
        first, first_res = self.qkv.forward_normed(x.clone(), None, self.norm1)  # layer 0: no residual yet
        qkv, residual = self.qkv.forward_normed(x.clone(), residual.clone(), self.norm1)
        h = self.o_proj(qkv[:, :512].contiguous())
        # norm + gate_up + SiLU-and-mul as one kernel where the implementation has it (CUDA), else in steps
        pair = self.gate_up.forward_normed_silu_mul(h.clone(), residual.clone(), self.norm2)
        gate_up, residual = self.gate_up.forward_normed(h.clone(), residual, self.norm2)  # unfused: in place
        act, act_residual = pair if pair is not None else (silu_and_mul(gate_up), residual)
        out = self.down.forward_silu_mul(gate_up)
        logits = self.logits.compute_logits(out.clone(), self.lm_head, residual.clone(), self.final)
        return [first, first_res, qkv, h, gate_up, residual, act, act_residual, out, logits]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m", [1, 8])
def test_fused_layers_match_unfused(dtype: torch.dtype, m: int, fused_off, impl: str) -> None:
    skip_unsupported(impl, dtype)
    block = Block(dtype)
    x, res = torch.randn(m, HIDDEN, device="cuda", dtype=dtype), torch.randn(m, HIDDEN, device="cuda", dtype=dtype)
    module = kernel_dispatch.gemv_kernel_for(x, block.qkv.weight)
    assert module is (cuda_gemv if impl == "cuda" else kernel_dispatch.kernel_for(x))
    fused = block(x, res)
    assert fused[-1].dtype == torch.float32 and fused[-1].shape == (m, VOCAB)
    fused_off()
    assert kernel_dispatch.gemv_kernel_for(x, block.qkv.weight) is None
    for got, want in zip(fused, block(x, res)):
        torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_layers_in_cuda_graph(dtype: torch.dtype, impl: str) -> None:
    skip_unsupported(impl, dtype)
    block = Block(dtype)
    x, res = torch.randn(4, HIDDEN, device="cuda", dtype=dtype), torch.randn(4, HIDDEN, device="cuda", dtype=dtype)
    block(x, res)  # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = block(x, res)
    x.copy_(torch.randn_like(x))
    res.copy_(torch.randn_like(res))
    graph.replay()
    torch.cuda.synchronize()
    for got, want in zip(outs, block(x, res)):
        torch.testing.assert_close(got, want, atol=0, rtol=0)


def test_cuda_gemv_ops_pick_the_projections(impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_GEMV_OPS limits the CUDA GEMVs to the named projections; unnamed layers are never limited."""
    if impl != "cuda":
        pytest.skip("the op filter applies to the CUDA GEMVs only")
    monkeypatch.setattr(kernel_dispatch, "CUDA_GEMV_OPS", frozenset({"qkv"}))
    x = torch.randn(1, HIDDEN, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(256, HIDDEN, device="cuda", dtype=torch.bfloat16)
    assert kernel_dispatch.gemv_kernel_for(x, w, "qkv") is cuda_gemv
    assert kernel_dispatch.gemv_kernel_for(x, w, "") is cuda_gemv
    assert kernel_dispatch.gemv_kernel_for(x, w, "o_proj") is None  # the Triton GEMVs are off here: cuBLAS
    qkv = QKVParallelLinear(HIDDEN, 64, 2, 2, gemv_op="qkv").cuda().to(torch.bfloat16)
    o_proj = RowParallelLinear(128, HIDDEN, gemv_op="o_proj").cuda().to(torch.bfloat16)
    assert (qkv.gemv_op, o_proj.gemv_op) == ("qkv", "o_proj")
    with torch.no_grad():  # the layers allocate with torch.empty: garbage, at times NaN, until weights load
        o_proj.weight.normal_(0, 0.05)
    torch.testing.assert_close(o_proj(x[:, :128].contiguous()), x[:, :128] @ o_proj.weight.T)


COMMON = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, vocab_size=512, max_position_embeddings=1024)
CONFIGS = {
    "llama": lambda: LlamaConfig(**COMMON, architectures=["LlamaForCausalLM"]),
    "llama-tied": lambda: LlamaConfig(**COMMON, tie_word_embeddings=True, architectures=["LlamaForCausalLM"]),
    "qwen2": lambda: Qwen2Config(**COMMON, architectures=["Qwen2ForCausalLM"]),
    "qwen3": lambda: Qwen3Config(**COMMON, head_dim=32, architectures=["Qwen3ForCausalLM"]),
}


def _step_logits(folder: str, dtype: str, prompts: list[list[int]]) -> tuple[list[list[int]], list[torch.Tensor]]:
    """Greedy tokens and every step's logits (prefill and decode, decode replayed from CUDA graphs)."""
    from radixlm.model_executor.forward_batch_builder import generate_static_batch
    from radixlm.model_executor.model_runner import ModelRunner
    from radixlm.server_args import ServerArgs

    runner = ModelRunner(ServerArgs(model_path=folder, device="cuda", dtype=dtype, max_total_tokens=4096,
                                    cuda_graph_max_bs=8).resolved())
    assert runner.cuda_graph_runner is not None
    logits: list[torch.Tensor] = []
    forward_logits = runner.forward_logits

    def record(fb):
        out = forward_logits(fb)
        logits.append(out.next_token_logits.clone())
        return out

    runner.forward_logits = record
    tokens = generate_static_batch(runner, prompts, 8)
    return tokens, logits


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("kind", list(CONFIGS))
def test_tiny_model_fused_on_off(kind: str, dtype: str, tmp_path, fused_off, impl: str,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    skip_unsupported(impl, getattr(torch, dtype))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(CONFIGS[kind](), dtype=torch.float32).save_pretrained(str(tmp_path))
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (3, 40, 129)]
    kernel = cuda_gemv if impl == "cuda" else kernel_dispatch.kernel_for(torch.zeros(1, device="cuda"))
    calls: list[str] = []
    # the decode MLP folds SiLU into gate_up with the CUDA GEMVs and into down with the Triton ones
    names = {"rmsnorm_gemv", "linear_gemv", "rmsnorm_gemv_silu_mul" if impl == "cuda" else "silu_mul_gemv"}
    for name in names:  # so the "on" run provably takes them
        fn = getattr(kernel, name)
        monkeypatch.setattr(kernel, name, lambda *a, _fn=fn, _name=name, **kw: calls.append(_name) or _fn(*a, **kw))
    tokens_on, logits_on = _step_logits(str(tmp_path), dtype, prompts)
    assert set(calls) == names
    fused_off()
    tokens_off, logits_off = _step_logits(str(tmp_path), dtype, prompts)
    tol = {"atol": 1e-3, "rtol": 1e-3} if dtype == "float32" else {"atol": 5e-2, "rtol": 5e-2}
    torch.testing.assert_close(logits_on[0], logits_off[0], **tol)  # the prefill: same inputs exactly
    if dtype == "float32":  # bf16 rounding may flip a near-tie, after which the sequences differ
        assert tokens_on == tokens_off
        for a, b in zip(logits_on, logits_off):
            torch.testing.assert_close(a, b, **tol)
