"""decode_attention_balanced_fwd (the evenly cut grid) against the reference attention: programs whose
tile ranges cross segments, programs with no tiles, a zero-length (padded) row."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel.decode_balanced import decode_attention_balanced_fwd
from radixlm_kernel.reference import decode_attention_ref

from test_attention import _pool


@pytest.mark.parametrize("seq_lens,kv_heads,group,programs", [([5, 300, 1, 77], 2, 4, 8), ([1000], 2, 4, 8),
                                                              ([3, 0, 40], 2, 2, 5), ([50, 50, 50], 2, 4, 64)])
def test_balanced_decode(device: str, dtype: torch.dtype, tol: dict, seq_lens: list[int], kv_heads: int,
                         group: int, programs: int) -> None:
    torch.manual_seed(0)
    head_dim = 64
    k_buf, v_buf, r2t, rows = _pool([max(n, 1) for n in seq_lens], kv_heads, head_dim, device, dtype)
    bs, hq = len(seq_lens), kv_heads * group
    q = torch.randn(bs, hq * head_dim, device=device, dtype=dtype)
    lens = torch.tensor(seq_lens, device=device)
    o, ref = torch.full_like(q, float("nan")), torch.empty(bs, hq, head_dim, device=device, dtype=dtype)
    decode_attention_balanced_fwd(q, k_buf, v_buf, o, r2t, rows, lens, head_dim ** -0.5, programs=programs)
    decode_attention_ref(q.view(bs, hq, head_dim), k_buf, v_buf, ref, r2t, rows, lens.clamp(min=1), head_dim ** -0.5)
    live = lens > 0
    torch.testing.assert_close(o.view(bs, hq, head_dim)[live], ref[live], **tol)
    assert torch.isfinite(o).all()  # a zero-length row gets zeros, not NaN
