"""Programmatic dependent launch (`radixlm_kernel.utils.pdl_args`): off under the interpreter and with
RADIXLM_PDL=0, on for CUDA sm90+; a chain of dependent launches (ours after cuBLAS, ours after ours)
captured in a CUDA graph gives bitwise what the same chain gives launched without it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm_kernel import utils
from radixlm_kernel.activation import silu_and_mul
from radixlm_kernel.argmax import argmax
from radixlm_kernel.norm import fused_add_rmsnorm

HAS_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def test_pdl_off_for_cpu_tensors(pdl) -> None:
    pdl(True)
    assert utils.pdl_args(torch.zeros(1)) == {"USE_PDL": False}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_pdl_env_switch(pdl) -> None:
    x = torch.zeros(1, device="cuda")
    pdl(False)
    assert utils.pdl_args(x) == {"USE_PDL": False}
    pdl(True)
    assert utils.pdl_args(x)["USE_PDL"] is HAS_SM90


def _chain(x: torch.Tensor, res: torch.Tensor, norm_w: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
    """Norm (after cuBLAS) -> SiLU-and-mul (after our norm) -> matmul, per weight; then argmax (two kernels)."""
    for w in ws:
        fused_add_rmsnorm(x, res, norm_w, 1e-6)
        x = F.linear(silu_and_mul(x), w)
    return argmax(x.float() + res.float())


@pytest.mark.skipif(not HAS_SM90, reason="PDL needs CUDA sm90+")
def test_pdl_chain_in_graph_equals_plain_launches(pdl) -> None:
    torch.manual_seed(0)
    hidden, inter, rows = 2048, 1024, 8
    ws = [torch.randn(hidden, inter, device="cuda", dtype=torch.bfloat16) * 0.05 for _ in range(24)]
    norm_w = torch.rand(hidden, device="cuda", dtype=torch.bfloat16) + 0.5
    x0 = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)
    r0 = torch.randn(rows, hidden, device="cuda", dtype=torch.bfloat16)

    pdl(False)
    res_plain = r0.clone()
    plain = _chain(x0.clone(), res_plain, norm_w, ws)

    pdl(True)
    x, res = x0.clone(), r0.clone()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        _chain(x.clone(), res.clone(), norm_w, ws)  # compile the PDL variants outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = _chain(x, res, norm_w, ws)
    for _ in range(3):  # every replay starts from the same inputs
        x.copy_(x0)
        res.copy_(r0)
        graph.replay()
        torch.cuda.synchronize()
        assert out.tolist() == plain.tolist()
        assert torch.equal(res, res_plain)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_pdl_on_gpu_follows_switch(pdl) -> None:
    """The CUDA C++ kernels' decision (`pdl_on_gpu`): the same switch and sm90+, without Triton's support."""
    x = torch.zeros(1, device="cuda")
    pdl(False)
    assert utils.pdl_on_gpu(x) is False
    pdl(True)
    assert utils.pdl_on_gpu(x) is HAS_SM90


def test_pdl_on_gpu_false_for_cpu_tensors(pdl) -> None:
    pdl(True)
    assert utils.pdl_on_gpu(torch.zeros(1)) is False
