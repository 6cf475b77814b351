"""Greedy decoding's argmax over the vocabulary, in two small kernels and without a host sync.

torch's `argmax(dim=-1)` reduces a row in one thread block, which at batch 1 over a 128k
vocabulary takes ~28 us on an H200 (RESULTS.md, tenth session). Here the first kernel splits
every row into chunks of `_CHUNK` logits, one program each, and writes each chunk's maximum and
its first index; the second picks, per row, the first chunk holding the row's maximum. Ties go
to the smallest index and NaN counts as larger than every number, both as `torch.argmax`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radixlm_kernel.utils import pdl_args, pdl_begin

_CHUNK = 4096  # logits per first-stage program (16 KB of float32)
_NUM_WARPS = 4


@triton.jit
def _chunk_max_kernel(x_ptr, val_ptr, idx_ptr, x_stride, vocab, num_chunks, CHUNK: tl.constexpr,
                      USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)  # see radixlm_kernel.utils.pdl_args
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    offs = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = offs < vocab
    x = tl.load(x_ptr + row * x_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    nan_here = mask & (x != x)
    any_nan = tl.max(nan_here.to(tl.int32), axis=0)
    best = tl.max(tl.where(nan_here, float("-inf"), x), axis=0)
    # a NaN outranks every number (torch.argmax); else the first index holding the maximum
    pick = tl.where(any_nan > 0, nan_here, mask & (x == best))
    first = tl.min(tl.where(pick, offs, vocab), axis=0)
    out = row * num_chunks + chunk
    tl.store(val_ptr + out, tl.where(any_nan > 0, float("nan"), best))
    tl.store(idx_ptr + out, first)


@triton.jit
def _pick_chunk_kernel(val_ptr, idx_ptr, out_ptr, num_chunks, vocab, BLOCK: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_begin(USE_PDL)  # see radixlm_kernel.utils.pdl_args
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < num_chunks
    v = tl.load(val_ptr + row * num_chunks + offs, mask=mask, other=float("-inf"))
    i = tl.load(idx_ptr + row * num_chunks + offs, mask=mask, other=vocab)
    nan = mask & (v != v)
    any_nan = tl.max(nan.to(tl.int32), axis=0)
    best = tl.max(tl.where(nan, float("-inf"), v), axis=0)
    pick = tl.where(any_nan > 0, nan, mask & (v == best))
    tl.store(out_ptr + row, tl.min(tl.where(pick, i, vocab), axis=0).to(tl.int64))


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """int64 `[bs]`: the index of each row's largest value in `logits` `[bs, vocab]` (float; unit last stride);
    equal to `torch.argmax(logits, dim=-1)`, ties and NaN included."""
    if logits.dim() != 2 or logits.stride(-1) != 1:
        raise ValueError(f"logits must be [bs, vocab] with unit last stride, got {tuple(logits.shape)}")
    bs, vocab = logits.shape
    if vocab == 0:
        raise ValueError("logits must have at least one column")
    out = torch.empty(bs, dtype=torch.int64, device=logits.device)
    if bs == 0:
        return out
    num_chunks = triton.cdiv(vocab, _CHUNK)
    vals = torch.empty((bs, num_chunks), dtype=torch.float32, device=logits.device)
    idxs = torch.empty((bs, num_chunks), dtype=torch.int32, device=logits.device)
    _chunk_max_kernel[(bs, num_chunks)](logits, vals, idxs, logits.stride(0), vocab, num_chunks, CHUNK=_CHUNK,
                                        num_warps=_NUM_WARPS, **pdl_args(logits))
    _pick_chunk_kernel[(bs,)](vals, idxs, out, num_chunks, vocab, BLOCK=max(16, triton.next_power_of_2(num_chunks)),
                              num_warps=1, **pdl_args(logits))
    return out
