"""The CUDA-core decode attention (`radixlm_kernel.cuda_decode`): against the torch reference on the GPU for
every launch config, group sizes 1 to 7, one and many splits and lengths from 1 up; where it cannot run, clear
errors naming the parameter or the reason."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import cuda_decode
from radixlm_kernel.reference import decode_attention_ref

HAS_CUDA = torch.cuda.is_available()
D = cuda_decode.HEAD_DIM


def _case(bs: int, hq: int, hkv: int, lens: list[int], device: str) -> dict:
    """A shuffled page-size-1 pool holding `lens` tokens per row, and q / o / scratch for `bs` rows."""
    total = sum(lens) + 1
    perm = torch.randperm(total - 1, device=device).to(torch.int32) + 1
    r2t = torch.zeros(bs, max(lens) + 3, dtype=torch.int32, device=device)
    at = 0
    for i, n in enumerate(lens):
        r2t[i, :n] = perm[at:at + n]
        at += n
    return dict(q=torch.randn(bs, hq, D, device=device, dtype=torch.bfloat16),
                k=torch.randn(total, hkv, D, device=device, dtype=torch.bfloat16),
                v=torch.randn(total, hkv, D, device=device, dtype=torch.bfloat16),
                r2t=r2t, rows=torch.arange(bs, device=device), lens=torch.tensor(lens, device=device))


@pytest.mark.skipif(HAS_CUDA, reason="the no-CUDA path")
def test_unavailable_without_cuda() -> None:
    assert cuda_decode.load() is None and cuda_decode.load_error == "no CUDA device"


def test_bad_inputs_name_the_parameter() -> None:
    c = _case(2, 8, 2, [5, 9], "cpu")
    o = torch.empty_like(c["q"])
    logits, lse = torch.empty(2, 8, 4, D), torch.empty(2, 8, 4)
    counters = torch.zeros(2, 2, dtype=torch.int32)
    args = [c["q"], c["k"], c["v"], o, c["r2t"], c["rows"], c["lens"], logits, lse, counters, 4, 0]
    with pytest.raises(ValueError, match="q must be a 3-D tensor of torch.bfloat16"):
        cuda_decode.check_inputs(c["q"].float(), *args[1:])
    with pytest.raises(ValueError, match="k_buffer must have head dim 128"):
        cuda_decode.check_inputs(args[0], c["k"][..., :64], *args[2:])
    with pytest.raises(ValueError, match="req_to_token must be a 2-D tensor of torch.int32"):
        cuda_decode.check_inputs(*args[:4], c["r2t"].long(), *args[5:])
    with pytest.raises(ValueError, match="attn_logits .* do not fit"):
        cuda_decode.check_inputs(*args[:7], logits[:, :, :2], *args[8:])
    with pytest.raises(ValueError, match="config must be one of"):
        cuda_decode.check_inputs(*args[:11], 99)
    with pytest.raises(ValueError, match="every tensor must be on q's CUDA device"):
        cuda_decode.check_inputs(*args)
    wide = _case(1, 18, 2, [3], "cpu")  # 9 q heads per kv head
    with pytest.raises(ValueError, match="must be 1 to 8 per kv head"):
        cuda_decode.check_inputs(wide["q"], wide["k"], wide["v"], torch.empty_like(wide["q"]), *args[4:])


@pytest.fixture(scope="module")
def ext() -> object:
    if not HAS_CUDA:
        pytest.skip("no CUDA device")
    module = cuda_decode.load()
    if module is None:
        pytest.skip(f"extension not buildable here: {cuda_decode.load_error}")
    return module


@pytest.mark.parametrize("hq,hkv", [(8, 8), (6, 3), (32, 8), (28, 4)])
@pytest.mark.parametrize("splits", [1, 5, 16])
def test_matches_reference(ext: object, hq: int, hkv: int, splits: int) -> None:
    torch.manual_seed(hq * 100 + splits)
    lens = [1, 63, 64, 65, 700, 2600, 33]
    c = _case(len(lens), hq, hkv, lens, "cuda")
    ref = torch.empty_like(c["q"])
    decode_attention_ref(c["q"], c["k"], c["v"], ref, c["r2t"], c["rows"], c["lens"], D ** -0.5)
    counters = torch.zeros(len(lens), hkv, dtype=torch.int32, device="cuda")
    for config in cuda_decode.CONFIGS:
        for align in (1, 64):
            o = torch.full_like(c["q"], float("nan"))
            cuda_decode.decode_attention_cuda(c["q"], c["k"], c["v"], o, c["r2t"], c["rows"], c["lens"].int(),
                                              D ** -0.5, splits, split_counters=counters, config=config, align=align)
            err = (o.float() - ref.float()).abs().max().item()
            assert err < 2e-2, f"config {config} align {align}: max error {err}"
            assert int(counters.abs().sum()) == 0, "the merge leaves the counters at zero"
