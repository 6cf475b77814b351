"""The sampling side of constrained decoding: one bit-packed mask per batch, applied to the logits.

The mask is xgrammar's layout: int32 [batch, ceil(vocab_size / 32)], bit j of word w set
means token 32 * w + j is allowed. Rows of unconstrained requests are all ones, so applying
the mask leaves their logits untouched (bit for bit). Matchers fill it on the CPU; it moves
to the logits' device once per step.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import xgrammar as xgr

from radixlm.constrained.base import GrammarObject

FULL_WORD = -1  # all 32 bits set


def bitmask_width(vocab_size: int) -> int:
    return (vocab_size + 31) // 32


def allocate_vocab_mask(vocab_size: int, batch_size: int, device: "str | torch.device" = "cpu") -> torch.Tensor:
    """An all-allowed CPU bitmask for `batch_size` rows over the model's `vocab_size`.

    `device` is where the mask will be applied: for CUDA the CPU buffer is pinned so the
    copy in `apply_vocab_mask` can be asynchronous.
    """
    pin = torch.device(device).type == "cuda"
    mask = torch.empty(batch_size, bitmask_width(vocab_size), dtype=torch.int32, pin_memory=pin)
    return mask.fill_(FULL_WORD)


def fill_batch_mask(grammars: Sequence[Optional[GrammarObject]], bitmask: torch.Tensor) -> list[int]:
    """Fill row i from `grammars[i]` (None = unconstrained: all allowed); returns the constrained rows.

    Rows are grouped by GrammarObject class so a backend fills them in one batched call.
    """
    groups: dict[type, tuple[list[GrammarObject], list[int]]] = {}
    for row, grammar in enumerate(grammars):
        if grammar is None:
            bitmask[row].fill_(FULL_WORD)
            continue
        objs, rows = groups.setdefault(type(grammar), ([], []))
        objs.append(grammar)
        rows.append(row)
    for cls, (objs, rows) in groups.items():
        cls.fill_vocab_mask_batch(objs, bitmask, rows)
    return sorted(row for _, rows in groups.values() for row in rows)


def build_batch_vocab_mask(
    grammars: Sequence[Optional[GrammarObject]], vocab_size: int, device: "str | torch.device" = "cpu"
) -> Optional[torch.Tensor]:
    """The per-step entry point: None if no row is constrained, else the filled bitmask on `device`."""
    if all(g is None for g in grammars):
        return None
    bitmask = allocate_vocab_mask(vocab_size, len(grammars), device)
    fill_batch_mask(grammars, bitmask)
    return bitmask.to(device, non_blocking=True)


def apply_vocab_mask(logits: torch.Tensor, bitmask: torch.Tensor, indices: Optional[Sequence[int]] = None) -> None:
    """Set disallowed logits to -inf in place (batched; xgrammar's CPU / Triton kernels).

    `logits` is [bs, V'] with V' >= the mask's vocab (ids past the mask's 32-word boundary
    are also masked in constrained rows). `indices` restricts the work to those rows.
    """
    bitmask = bitmask.to(logits.device, non_blocking=True)
    covered = bitmask.shape[-1] * 32
    vocab = min(logits.shape[-1], covered)
    rows = list(indices) if indices is not None else None
    xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=vocab, indices=rows)
    if logits.shape[-1] > covered:  # padded logits beyond the mask: never allowed when constrained
        constrained = _constrained_rows(bitmask) if rows is None else torch.tensor(rows, device=logits.device)
        logits[constrained, covered:] = float("-inf")


def _constrained_rows(bitmask: torch.Tensor) -> torch.Tensor:
    return (bitmask != FULL_WORD).any(dim=-1).nonzero().flatten()


def bitmask_to_bool_mask(bitmask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """bool [bs, vocab_size], True = allowed: the `SamplingBatchInfo.vocab_mask` form."""
    shifts = torch.arange(32, dtype=torch.int32, device=bitmask.device)
    bits = (bitmask.unsqueeze(-1) >> shifts) & 1
    return bits.flatten(start_dim=-2)[..., :vocab_size].bool()


def apply_vocab_mask_reference(logits: torch.Tensor, bitmask: torch.Tensor) -> None:
    """Pure-torch reference of `apply_vocab_mask` (no indices), for tests."""
    allowed = bitmask_to_bool_mask(bitmask.to(logits.device), logits.shape[-1])
    pad = logits.shape[-1] - allowed.shape[-1]
    if pad > 0:
        constrained = (bitmask.to(logits.device) != FULL_WORD).any(dim=-1, keepdim=True)
        allowed = torch.cat([allowed, (~constrained).expand(-1, pad)], dim=-1)
    logits.masked_fill_(~allowed, float("-inf"))
