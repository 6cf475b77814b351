"""Layer 1: the token-granular KV slot allocator (page size 1).

The free list is a device tensor of slot indices. `alloc(n)` slices its front and
returns None when fewer than n slots are free (never a partial allocation).
`free(idx)` appends; between `free_group_begin()` and `free_group_end()` frees are
collected and appended in one concatenation. Slot 0 is never handed out: it is the
padding target that padded batch rows (CUDA graphs) write into.
"""

from __future__ import annotations

from typing import Optional

import torch


class TokenToKVPoolAllocator:
    def __init__(self, size: int, device: torch.device | str = "cpu") -> None:
        if size <= 0:
            raise ValueError(f"TokenToKVPoolAllocator size must be positive, got {size}")
        self.size = size  # usable slots: 1..size
        self.device = torch.device(device)
        self._group: Optional[list[torch.Tensor]] = None
        self.clear()

    def clear(self) -> None:
        self.free_slots = torch.arange(1, self.size + 1, dtype=torch.int64, device=self.device)
        self._group = None

    def available_size(self) -> int:
        return int(self.free_slots.numel())

    def alloc(self, need: int) -> Optional[torch.Tensor]:
        if need < 0:
            raise ValueError(f"alloc needs a non-negative count, got {need}")
        if need > self.free_slots.numel():
            return None
        out = self.free_slots[:need]
        self.free_slots = self.free_slots[need:]
        return out

    def free(self, indices: torch.Tensor) -> None:
        if indices.numel() == 0:
            return
        if self._group is not None:
            self._group.append(indices)
        else:
            self.free_slots = torch.cat((self.free_slots, indices.to(self.free_slots)))

    def free_group_begin(self) -> None:
        self._group = []

    def free_group_end(self) -> None:
        group, self._group = self._group, None
        if group:
            self.free(torch.cat(group))
