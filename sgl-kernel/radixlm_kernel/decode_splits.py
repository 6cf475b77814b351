"""How a decode batch is split for `decode_attention_fwd`: how many KV splits each request gets
(enough programs to fill the GPU `occupancy_for(bs)` times over, at least MIN_SPLIT_LEN tokens
each) and in which order the requests' programs are launched. Everything here is a host int of
the batch size or a device tensor op, so a CUDA graph records it.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton

from radixlm_kernel import environ

# Tuning knobs, module-level so a sweep (benchmark/gpu_kernel_sweep.py --splits-only, --occupancy-only) can set them
MIN_SPLIT_LEN = 64  # fewer tokens per split and the merge costs more than the parallelism gains
OCCUPANCY = 2  # aim for this many split programs per SM (batches above every band below)
# (max rows, occupancy) bands, smallest first: small and mid-sized batches aim for more, shorter splits, so
# that a row's long context does not run on alone. Eighth session (`gpu_kernel_sweep.py --occupancy-only`,
# us per layer call, 5-16 rows, 2 -> 3: bf16 8 x 2048 31.6 -> 27.6, 16 x 1024 28.7 -> 24.9; fp8 21.5 -> 18.9,
# 18.7 -> 15.8). Nineteenth session (`--splits-only`, bf16, the eighteenth session's bands ((4, 2), (16, 3))
# and unaligned splits -> these bands, aligned): lengths uniform in [1, 2 x ctx - 1] as a serving batch has
# them, 4 x 2600 28.8 -> 19.3, 6 x 2600 35.8 -> 30.8, 8 x 2560 38.0 -> 27.8, 12 x 2048 52.0 -> 47.7,
# 16 x 2048 61.8 -> 55.4; equal lengths about even, 4 x 2048 16.6 -> 17.2, 8 x 2048 29.4 -> 29.9, 16 x 1024
# 25.7 -> 25.1.
# Twentieth session (`--occupancy-only`): batches above 16 rows run the server's cascade path, longest
# context first; there 6 per SM up to 64 rows beat 2 (us per layer call, lengths uniform in [1, 4095]: 32 rows
# 123.0 -> 81.7, 64 rows 184.4 -> 137.7; fp8 pools at 4: 83.4 -> 59.7, 156.3 -> 90.1). Above 64 rows the grid
# has one split at any of these occupancies.
OCCUPANCY_BANDS: tuple[tuple[int, int], ...] = ((8, 6), (16, 4), (64, 6))
# fp8 pools keep the eighth session's bands: over fp8 pools the bands above (nineteenth session, aligned) lost on
# equal lengths (8 x 2048 18.6 -> 24.4, 16 x 1024 15.5 -> 25.0 us) about what they won on random ones (8 x 2560
# 28.1 -> 21.4, 6 x 2600 28.5 -> 25.1)
FP8_OCCUPANCY_BANDS: tuple[tuple[int, int], ...] = ((4, 2), (16, 3), (64, 4))


if (_occupancy := environ.decode_occupancy()) is not None:  # split programs per SM, for A/B runs
    OCCUPANCY, OCCUPANCY_BANDS = _occupancy


def occupancy_for(bs: int, fp8: bool = False) -> int:
    """Split programs per SM a decode batch of `bs` rows aims for: its band's (`OCCUPANCY_BANDS`, or
    `FP8_OCCUPANCY_BANDS` over an fp8 pool), else `OCCUPANCY`."""
    bands = FP8_OCCUPANCY_BANDS if fp8 else OCCUPANCY_BANDS
    return next((occ for max_bs, occ in bands if bs <= max_bs), OCCUPANCY)


def grid_kv_splits(bs: int, num_kv_heads: int, max_kv_splits: int, num_sms: int, heads_per_program: int = 1,
                   fp8: bool = False) -> int:
    """The most splits any request of a batch of `bs` gets: enough (request, kv head group, split)
    programs to fill the GPU `occupancy_for(bs)` times over, capped at
    `max_kv_splits`. A host int (it depends on the batch size only), so it sizes the grid: no programs
    launched just to exit. `heads_per_program`: what `kv_heads_per_program` gives for the pool; `fp8`: the
    pool holds fp8 K/V."""
    programs = bs * triton.cdiv(num_kv_heads, heads_per_program)
    occupancy = occupancy_for(bs, fp8)
    return max(1, min(max_kv_splits, triton.cdiv(occupancy * num_sms, max(1, programs))))


def compute_num_kv_splits(seq_lens: torch.Tensor, num_kv_heads: int, max_kv_splits: int,
                          num_sms: Optional[int] = None, out: Optional[torch.Tensor] = None,
                          heads_per_program: int = 1, fp8: bool = False) -> torch.Tensor:
    """Splits per request, on the device (int32 [bs]): enough programs to fill the GPU, at least
    `MIN_SPLIT_LEN` tokens per split, at most `grid_kv_splits(...)`. No host sync; `out` reuses a buffer."""
    bs = seq_lens.shape[0]
    if num_sms is None:
        num_sms = num_sms_of(seq_lens.device)
    by_occupancy = grid_kv_splits(bs, num_kv_heads, max_kv_splits, num_sms, heads_per_program, fp8)
    splits = torch.clamp((seq_lens + (MIN_SPLIT_LEN - 1)) // MIN_SPLIT_LEN, 1, by_occupancy)
    if out is None:
        return splits.to(torch.int32)
    out[:bs].copy_(splits)
    return out[:bs]


def prefix_order(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, out: Optional[torch.Tensor] = None
                 ) -> torch.Tensor:
    """A launch order for `decode_attention_fwd` that puts requests with the same first KV slot (a
    shared cached prefix: the radix cache hands them the same slots) next to each other. On the
    device, no host sync; `out` (int64 [>=bs]) reuses a buffer under a CUDA graph."""
    first = req_to_token[req_pool_indices, 0]
    order = torch.argsort(first)
    if out is None:
        return order
    out[:order.shape[0]].copy_(order)
    return out[:order.shape[0]]


def longest_first_order(seq_lens: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A launch order for `decode_attention_fwd` that starts the longest contexts first, so the short
    ones fill the last wave instead of a long one running on alone (longest-processing-time first).
    On the device, no host sync; `out` (int64 [>=bs]) reuses a buffer under a CUDA graph."""
    order = torch.argsort(seq_lens, descending=True)
    if out is None:
        return order
    out[:order.shape[0]].copy_(order)
    return out[:order.shape[0]]


def num_sms_of(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 8
