"""The batched sampler: logit biases, masks, penalties, temperature, top-k / top-p / min-p, then seeded noise.

Sampling is a pure function of (logits, seed, step): the random draw for token t of a
row is u = hash(seed, step, t), and the sampled token is argmax(p / Exp(u)) with
Exp(u) = -log(u) (the exponential-race form of sampling from p). No per-request Python
loop, no host sync; the only Python branches read host-side flags on SamplingBatchInfo.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from radixlm.constrained.vocab_mask import apply_vocab_mask
from radixlm.layers.kernel_dispatch import kernel_for
from radixlm.layers.row_slices import row_slices
from radixlm.sampling.sampling_batch_info import SamplingBatchInfo


def _signed64(x: int) -> int:
    return x - (1 << 64) if x >= (1 << 63) else x


_GOLDEN = _signed64(0x9E3779B97F4A7C15)
_MIX1 = _signed64(0xBF58476D1CE4E5B9)
_MIX2 = _signed64(0x94D049BB133111EB)
_TINY = torch.finfo(torch.float32).tiny
# rows x vocab elements sampled in one pass (2**25: 261 rows at a 128k vocabulary, ~2 GB of temporaries)
SAMPLE_SLICE_ELEMENTS = 1 << 25


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift on int64 (torch's `>>` is arithmetic)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """The splitmix64 finaliser over int64 tensors (wrapping arithmetic)."""
    z = x + _GOLDEN
    z = (z ^ _shift_right(z, 30)) * _MIX1
    z = (z ^ _shift_right(z, 27)) * _MIX2
    return z ^ _shift_right(z, 31)


def uniform_noise(seeds: torch.Tensor, steps: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """u[i, t] in (0, 1) from hash(seeds[i], steps[i], t); float32 [bs, vocab]."""
    row = splitmix64(splitmix64(seeds.long()) ^ steps.long())
    token = torch.arange(vocab_size, dtype=torch.int64, device=seeds.device)
    h = splitmix64(row.unsqueeze(1) ^ splitmix64(token).unsqueeze(0))
    # 23 bits: (2**23 - 1) + 0.5 is exact in float32, so u < 1 always (24 bits rounded up to 1.0,
    # making -log(u) zero and the race value infinite for about 1 draw in 128 at a 128k vocabulary)
    return (_shift_right(h, 41).float() + 0.5) * (1.0 / (1 << 23))


def apply_penalties(logits: torch.Tensor, info: SamplingBatchInfo) -> torch.Tensor:
    counts = info.output_token_counts
    if counts is None:
        return logits
    counts = counts.to(logits.dtype)
    appeared = counts > 0
    if info.repetition_penalties is not None:
        rep = info.repetition_penalties.view(-1, 1)
        penalised = torch.where(logits > 0, logits / rep, logits * rep)
        logits = torch.where(appeared, penalised, logits)
    if info.frequency_penalties is not None:
        logits = logits - info.frequency_penalties.view(-1, 1) * counts
    if info.presence_penalties is not None:
        logits = logits - info.presence_penalties.view(-1, 1) * appeared.to(logits.dtype)
    return logits


def filter_probs(probs: torch.Tensor, info: SamplingBatchInfo) -> torch.Tensor:
    """Zero tokens outside top-k, outside the top-p nucleus, or below min_p * max prob (one sort)."""
    if not (info.need_top_k_sampling or info.need_top_p_sampling or info.need_min_p_sampling):
        return probs
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    drop = torch.zeros_like(sorted_probs, dtype=torch.bool)
    if info.need_top_k_sampling:
        rank = torch.arange(probs.shape[-1], device=probs.device).unsqueeze(0)
        top_ks = torch.where(info.top_ks > 0, info.top_ks, probs.shape[-1]).view(-1, 1)
        drop |= rank >= top_ks
    if info.need_top_p_sampling:  # keep the smallest prefix whose mass reaches top_p
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
        drop |= (mass_before > info.top_ps.view(-1, 1)) & (info.top_ps.view(-1, 1) < 1.0)
    if info.need_min_p_sampling:
        drop |= sorted_probs < info.min_ps.view(-1, 1) * sorted_probs[:, :1]
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter(1, order, sorted_probs)


def greedy_argmax(logits: torch.Tensor) -> torch.Tensor:
    """int64 [bs]: `torch.argmax(logits, dim=-1)`; on CUDA the project's kernel (torch's reduces a row in
    one thread block: ~28 us at a 128k vocabulary on an H200, against a few us)."""
    kernel = kernel_for(logits)
    if kernel is not None and logits.dim() == 2 and logits.stride(-1) == 1 and logits.shape[-1] > 0:
        return kernel.argmax(logits)
    return torch.argmax(logits, dim=-1)


class Sampler(nn.Module):
    def forward(self, logits: torch.Tensor, info: Optional[SamplingBatchInfo],
                greedy_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        """int64 [bs] next tokens; `info=None` means all-greedy. `greedy_ids`: the argmax of `logits`
        if the forward already took it (used unless masks or penalties change the logits)."""
        logits = logits.float()
        if info is None:
            return greedy_ids if greedy_ids is not None else greedy_argmax(logits)
        if info.logit_bias is not None:
            logits = logits + info.logit_bias
            greedy_ids = None
        if info.vocab_bitmask is not None:  # in place: unconstrained rows stay bit-identical
            apply_vocab_mask(logits, info.vocab_bitmask)
            greedy_ids = None
        if info.vocab_mask is not None:
            logits = logits.masked_fill(~info.vocab_mask, float("-inf"))
            greedy_ids = None
        if info.output_token_counts is not None:
            logits = apply_penalties(logits, info)
            greedy_ids = None
        greedy = greedy_ids if greedy_ids is not None else greedy_argmax(logits)
        if info.is_all_greedy:
            return greedy
        slices = row_slices(logits.shape[0], logits.shape[-1], SAMPLE_SLICE_ELEMENTS)
        if len(slices) == 1:
            return sample_rows(logits, info, greedy)
        # a slice at a time: the draw's [rows, vocab] temporaries (~60 bytes per element in all) stay bounded
        # at any batch size; every row's draw is its own, so the slices give the same tokens as one pass
        return torch.cat([sample_rows(logits[s], info.rows(s.start, s.stop), greedy[s]) for s in slices])


def sample_rows(logits: torch.Tensor, info: SamplingBatchInfo, greedy: torch.Tensor) -> torch.Tensor:
    """Temperature, top-k / top-p / min-p, then the seeded exponential race; greedy rows keep `greedy`."""
    temps = info.temperatures.view(-1, 1)
    probs = torch.softmax(logits / torch.where(temps > 0, temps, 1.0), dim=-1)
    probs = filter_probs(probs, info)
    # u can round to exactly 1.0 in float32 (-log(u) == 0): clamp, or a zero-probability
    # token (masked, filtered) would score 0/0 = NaN, which argmax picks
    exp_noise = (-torch.log(uniform_noise(info.seeds, info.steps, probs.shape[-1]))).clamp_min_(_TINY)
    race = probs / exp_noise
    sampled = greedy_argmax(race)
    return torch.where(temps.view(-1) > 0, sampled, greedy)
