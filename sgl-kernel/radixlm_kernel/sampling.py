"""Seeded top-k / top-p / min-p sampling without sorting and without a host sync.

The draw is the exponential race of radixlm's sampler: token = argmax over kept tokens of
`p / -log(u)`, with u = hash(seed, step, token) (splitmix64, see `reference.uniform_noise_ref`).
The kept set of each filter is an upper set of the probabilities (the k largest, the
nucleus, those >= min_p * max), so no sort is needed: take the race winner c among the
tokens with p > pivot; count the tokens with p > p_c and their mass; if c passes every
filter it is the answer, else every token with p <= p_c fails too, so set pivot = p_c
and race again. The most probable token always passes, so the loop ends; usually in
one round. One program per row; two passes over the vocabulary per round.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_BLOCK = 8192  # module-level knobs, so a sweep can set them (8192/16 was best of 1024..8192 on an H200)
_NUM_WARPS = 16
_BLOCK_INTERPRETER = 16384  # the interpreter pays per block, not per element


@triton.jit
def _splitmix64(x):
    z = x + 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    return z ^ (z >> 31)


@triton.jit
def _race_winner(probs_row, row_hash, pivot, vocab, BLOCK: tl.constexpr):
    """(race winner index, max prob) among the tokens with p > pivot; max prob -1 when there are none."""
    best_val = pivot * 0.0 - 1.0
    best_idx = vocab * 0
    max_p = pivot * 0.0 - 1.0
    for start in range(0, vocab, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < vocab
        p = tl.load(probs_row + offs, mask=mask, other=0.0).to(tl.float32)
        token_hash = _splitmix64(offs.to(tl.int64).to(tl.uint64, bitcast=True))
        h = _splitmix64(row_hash ^ token_hash)
        u = ((h >> 41).to(tl.int32).to(tl.float32) + 0.5) * (1.0 / 8388608.0)  # in (0, 1), see reference
        cand = mask & (p > pivot)
        race = tl.where(cand, p / -tl.log(u), -1.0)
        blk_val = tl.max(race, axis=0)
        blk_idx = tl.min(tl.where(race == blk_val, offs, vocab), axis=0)
        better = blk_val > best_val  # strict: the earliest index wins ties, as torch.argmax
        best_idx = tl.where(better, blk_idx, best_idx)
        best_val = tl.where(better, blk_val, best_val)
        max_p = tl.maximum(max_p, tl.max(tl.where(cand, p, -1.0), axis=0))
    return best_idx, max_p


@triton.jit
def _rank_and_mass(probs_row, p_c, vocab, BLOCK: tl.constexpr):
    """How many tokens have p > p_c, and their total probability."""
    count = vocab * 0
    mass = p_c * 0.0
    for start in range(0, vocab, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        p = tl.load(probs_row + offs, mask=offs < vocab, other=0.0).to(tl.float32)
        above = p > p_c
        count += tl.sum(above.to(tl.int32), axis=0)
        mass += tl.sum(tl.where(above, p, 0.0), axis=0)
    return count, mass


@triton.jit
def _sampling_kernel(probs_ptr, top_ks_ptr, top_ps_ptr, min_ps_ptr, seeds_ptr, steps_ptr, out_ptr, probs_stride,
                     vocab, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    probs_row = probs_ptr + row * probs_stride
    top_k = tl.load(top_ks_ptr + row).to(tl.int32)
    top_k = tl.where((top_k > 0) & (top_k < vocab), top_k, vocab)
    top_p = tl.load(top_ps_ptr + row).to(tl.float32)
    min_p = tl.load(min_ps_ptr + row).to(tl.float32)
    seed = tl.load(seeds_ptr + row).to(tl.int64).to(tl.uint64, bitcast=True)
    step = tl.load(steps_ptr + row).to(tl.int64).to(tl.uint64, bitcast=True)
    row_hash = _splitmix64(_splitmix64(seed) ^ step)
    need_rank = (top_k < vocab) | (top_p < 1.0)
    pivot = top_p * 0.0 - 1.0
    result = vocab * 0
    done = vocab * 0
    while done == 0:
        winner, max_p = _race_winner(probs_row, row_hash, pivot, vocab, BLOCK)
        p_c = tl.load(probs_row + winner).to(tl.float32)
        ok = (p_c >= min_p * max_p) | (max_p < 0.0)  # no candidates left (bad filter values): stop
        if need_rank:
            count, mass = _rank_and_mass(probs_row, p_c, vocab, BLOCK)
            ok = ok & (count < top_k) & ((top_p >= 1.0) | (mass <= top_p))
        result = winner
        done = ok.to(tl.int32)
        pivot = p_c
    tl.store(out_ptr + row, result.to(tl.int64))


def top_k_top_p_min_p_sampling(probs: torch.Tensor, top_ks: torch.Tensor, top_ps: torch.Tensor,
                               min_ps: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """int64 [bs] token ids sampled from `probs` `[bs, vocab]` (each row sums to 1, temperature applied).

    top_ks int [bs] (<= 0 or >= vocab: off); top_ps float [bs] (>= 1: off); min_ps float [bs] (0: off);
    seeds / steps int64 [bs]: the draw is a pure function of (seed, step), equal to
    `reference.top_k_top_p_min_p_sampling_ref` up to float rounding at the filter boundaries.
    """
    if probs.dim() != 2 or probs.stride(-1) != 1:
        raise ValueError(f"probs must be [bs, vocab] with unit last stride, got {tuple(probs.shape)}")
    bs, vocab = probs.shape
    out = torch.empty(bs, dtype=torch.int64, device=probs.device)
    if bs == 0:
        return out
    _sampling_kernel[(bs,)](probs, top_ks, top_ps, min_ps, seeds, steps, out, probs.stride(0), vocab,
                            BLOCK=_BLOCK if probs.is_cuda else _BLOCK_INTERPRETER, num_warps=_NUM_WARPS)
    return out
