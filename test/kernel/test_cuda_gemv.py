"""The CUDA C++ small-batch GEMV (`radixlm_kernel.cuda_gemv`): against an fp32 matmul on the GPU, with odd
output sizes (row tails) and every launch config; where it cannot be built, a clear error."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import cuda_gemv
from radixlm_kernel.reference import rmsnorm_ref

HAS_CUDA = torch.cuda.is_available()


@pytest.mark.skipif(HAS_CUDA, reason="the no-CUDA path")
def test_unavailable_without_cuda() -> None:
    assert cuda_gemv.load() is None and cuda_gemv.load_error == "no CUDA device"
    with pytest.raises(RuntimeError, match="CUDA GEMV extension is unavailable: no CUDA device"):
        cuda_gemv.gemv(torch.zeros(1, 8, dtype=torch.bfloat16), torch.zeros(8, 8, dtype=torch.bfloat16))


@pytest.fixture(scope="module")
def ext() -> object:
    if not HAS_CUDA:
        pytest.skip("no CUDA device")
    module = cuda_gemv.load()
    if module is None:
        pytest.skip(f"extension not buildable here: {cuda_gemv.load_error}")
    return module


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("n,k", [(1000, 4096), (4096, 14336), (37, 256)])
def test_matches_fp32_matmul(ext: object, m: int, n: int, k: int) -> None:
    torch.manual_seed(m * n)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * 0.02
    ref = x.float() @ w.float().T
    for config in cuda_gemv.ALL_CONFIGS:
        for warps in (4, 8):
            y = cuda_gemv.gemv(x, w, config, warps)
            assert y.shape == (m, n) and y.dtype == torch.bfloat16
            torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)


def test_rejects_bad_input(ext: object) -> None:
    """Checked in Python before the launch, each error naming the parameter; the call after them works."""
    w = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(1, 256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="x must have 1 to 8 rows, got 9"):
        cuda_gemv.gemv(torch.randn(9, 256, device="cuda", dtype=torch.bfloat16), w)
    with pytest.raises(ValueError, match="x must be a 2-D bfloat16 CUDA tensor"):
        cuda_gemv.gemv(torch.randn(1, 256, device="cuda"), w)
    with pytest.raises(ValueError, match="need one K"):
        cuda_gemv.gemv(torch.randn(1, 128, device="cuda", dtype=torch.bfloat16), w)
    with pytest.raises(ValueError, match="config must be one of"):
        cuda_gemv.gemv(x, w, config=99)
    with pytest.raises(ValueError, match="warps must be"):
        cuda_gemv.gemv(x, w, warps=0)
    torch.testing.assert_close(cuda_gemv.gemv(x, w).float(), x.float() @ w.float().T, atol=2e-2, rtol=2e-2)


def _normed(x: torch.Tensor, res, g: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The unfused path's (h, x'): h = x + res rounded to bf16, x' its norm with the kernels' rounding points."""
    h = (x.float() + res.float()).to(torch.bfloat16) if res is not None else x
    return h, rmsnorm_ref(h, g, eps)


@pytest.mark.parametrize("m", [1, 3, 8])
@pytest.mark.parametrize("k", [4096, 264])
@pytest.mark.parametrize("with_residual", [True, False])
def test_rmsnorm_variants_match_reference(ext: object, m: int, k: int, with_residual: bool,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """add + RMSNorm before the GEMV, and with SiLU-and-mul after it (gate rows, then up rows; odd row
    counts for the tails), against float32 references of the unfused sequence, for every launch config."""
    torch.manual_seed(m + k)
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(m, k, device="cuda", dtype=torch.bfloat16) if with_residual else None
    g = (1 + 0.1 * torch.randn(k, device="cuda")).to(torch.bfloat16)
    w = torch.randn(1002, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
    bias = torch.randn(1002, device="cuda", dtype=torch.bfloat16)
    h, xn = _normed(x, res, g, 1e-5)
    ref = xn.float() @ w.float().T + bias.float()
    gate, up = ref.to(torch.bfloat16).float().chunk(2, dim=-1)
    act_ref = torch.nn.functional.silu(gate) * up
    for config in cuda_gemv.ALL_CONFIGS:
        for warps in (4, 8):
            monkeypatch.setattr(cuda_gemv, "DEFAULT", (config, warps))
            y, h_out = cuda_gemv.rmsnorm_gemv(x, res, g, 1e-5, w, bias)
            torch.testing.assert_close(y.float(), ref, atol=2e-2, rtol=2e-2)
            assert torch.equal(h_out, h) and (res is not None or h_out is x)
            logits, none = cuda_gemv.rmsnorm_gemv(x, res, g, 1e-5, w, store_residual=False, out_dtype=torch.float32)
            assert (none is None if res is not None else none is x) and logits.dtype == torch.float32
            torch.testing.assert_close(logits, ref - bias.float(), atol=2e-2, rtol=2e-2)
            act, h_act = cuda_gemv.rmsnorm_gemv_silu_mul(x, res, g, 1e-5, w, bias)
            assert act.shape == (m, 501) and torch.equal(h_act, h)
            torch.testing.assert_close(act.float(), act_ref, atol=3e-2, rtol=2e-2)


def test_silu_mul_and_plain_entry_points(ext: object) -> None:
    """`silu_mul_gemv` (SiLU kernel + GEMV) and `linear_gemv` with a bias and float32 output."""
    torch.manual_seed(3)
    gate_up = torch.randn(5, 2 * 1032, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(77, 1032, device="cuda", dtype=torch.bfloat16) * 0.03
    bias = torch.randn(77, device="cuda", dtype=torch.bfloat16)
    gate, up = gate_up.float().chunk(2, dim=-1)
    act = (torch.nn.functional.silu(gate) * up).to(torch.bfloat16).float()
    want = act @ w.float().T + bias.float()
    torch.testing.assert_close(cuda_gemv.silu_mul_gemv(gate_up, w, bias).float(), want, atol=3e-2, rtol=2e-2)
    got = cuda_gemv.linear_gemv(gate_up[:, :1032], w, bias, out_dtype=torch.float32)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, gate_up[:, :1032].float() @ w.float().T + bias.float(), atol=2e-2, rtol=2e-2)


def test_norm_inputs_rejected_by_name(ext: object) -> None:
    x = torch.randn(2, 256, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    g = torch.ones(256, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="residual must match x"):
        cuda_gemv.rmsnorm_gemv(x, torch.randn(3, 256, device="cuda", dtype=torch.bfloat16), g, 1e-5, w)
    with pytest.raises(ValueError, match=r"norm_weight must be \[256\]"):
        cuda_gemv.rmsnorm_gemv(x, None, g[:128], 1e-5, w)
    with pytest.raises(ValueError, match="gate rows, then up rows"):
        cuda_gemv.rmsnorm_gemv_silu_mul(x, None, g, 1e-5, w[:63])
    with pytest.raises(ValueError, match="out_dtype must be bfloat16 or float32"):
        cuda_gemv.linear_gemv(x, w, out_dtype=torch.float16)


@pytest.mark.skipif(HAS_CUDA, reason="the no-CUDA path")
def test_layers_keep_cublas_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for, the CUDA GEMVs stay off where they cannot load: `prepare_cuda_gemv` says so, and the
    layers' dispatch never hands a CPU tensor to them."""
    from radixlm.layers import kernel_dispatch

    monkeypatch.setattr(kernel_dispatch, "CUDA_GEMV_MAX_TOKENS", 8)
    assert kernel_dispatch.prepare_cuda_gemv(torch.bfloat16) is False
    x, w = torch.zeros(1, 64, dtype=torch.bfloat16), torch.zeros(32, 64, dtype=torch.bfloat16)
    assert kernel_dispatch.gemv_kernel_for(x, w) is None
    assert not cuda_gemv.supports(x, w)


def _layer_chain(x: torch.Tensor, res: torch.Tensor, ws: list[tuple[torch.Tensor, ...]],
                 g: torch.Tensor) -> torch.Tensor:
    """A decode layer's kernels as the CUDA GEMVs run them, per weight set: norm + qkv-like GEMV, our SiLU kernel,
    a plain GEMV (o_proj-like), norm + gate_up + SiLU in one kernel, a plain GEMV (down-like); each reads what the
    kernel before it wrote, and the residual threads through all of them."""
    from radixlm_kernel.activation import silu_and_mul

    for w_in, w_o, w_gu, w_down in ws:
        y, res = cuda_gemv.rmsnorm_gemv(x, res, g, 1e-6, w_in)
        x = cuda_gemv.linear_gemv(silu_and_mul(y), w_o)
        act, res = cuda_gemv.rmsnorm_gemv_silu_mul(x, res, g, 1e-6, w_gu)
        x = cuda_gemv.linear_gemv(act, w_down)
    return x.float() + res.float()


@pytest.mark.skipif(not (HAS_CUDA and torch.cuda.get_device_capability()[0] >= 9), reason="PDL needs CUDA sm90+")
@pytest.mark.parametrize("m,mode,config", [(1, 1, 0), (1, 2, 0), (1, 3, 0), (1, 5, 0), (3, 1, 0), (3, 5, 0),
                                           (3, 5, 7), (8, 5, 7), (8, 1, 5)])
def test_pdl_chain_in_graph_equals_plain_launches(ext: object, pdl, monkeypatch: pytest.MonkeyPatch, m: int,
                                                  mode: int, config: int) -> None:
    """With programmatic dependent launch each GEMV issues its first weight loads while the kernel before it
    still runs; a 16-layer chain captured in a CUDA graph must give bitwise what plain launches give, on CUDA
    cores (config 0) and on tensor cores (5, 7: K split over 1 and 4 warps)."""
    torch.manual_seed(m)
    monkeypatch.setattr(cuda_gemv, "DEFAULT", (config, 8))
    hidden, inter = 1024, 1536
    def weight(n: int, k: int) -> torch.Tensor:
        return torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5
    ws = [(weight(2 * hidden, hidden), weight(hidden, hidden), weight(2 * inter, hidden), weight(hidden, inter))
          for _ in range(16)]
    g = torch.rand(hidden, device="cuda", dtype=torch.bfloat16) + 0.5
    x0 = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16)
    r0 = torch.randn(m, hidden, device="cuda", dtype=torch.bfloat16)

    pdl(False)
    assert cuda_gemv.pdl_bits(x0) == 0
    plain = _layer_chain(x0.clone(), r0.clone(), ws, g)
    pdl(True)
    monkeypatch.setenv("RADIXLM_CUDA_GEMV_PDL", str(mode))
    assert cuda_gemv.pdl_bits(x0) == mode
    x, res = x0.clone(), r0.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        _layer_chain(x.clone(), res.clone(), ws, g)  # compile the Triton PDL variant outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _layer_chain(x, res, ws, g)
    for _ in range(3):
        x.copy_(x0)
        res.copy_(r0)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, plain)


def test_pdl_bits_switch(pdl, monkeypatch: pytest.MonkeyPatch) -> None:
    """RADIXLM_CUDA_GEMV_PDL takes 0-7 and names itself otherwise; CPU tensors never use PDL."""
    pdl(True)
    assert cuda_gemv.pdl_bits(torch.zeros(1)) == 0
    if HAS_CUDA and torch.cuda.get_device_capability()[0] >= 9:
        monkeypatch.setenv("RADIXLM_CUDA_GEMV_PDL", "2")
        assert cuda_gemv.pdl_bits(torch.zeros(1, device="cuda")) == 2
        monkeypatch.setenv("RADIXLM_CUDA_GEMV_PDL", "on")
        with pytest.raises(ValueError, match="RADIXLM_CUDA_GEMV_PDL must be an integer from 0 to 7"):
            cuda_gemv.pdl_bits(torch.zeros(1, device="cuda"))
