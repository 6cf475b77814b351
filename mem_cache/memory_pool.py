"""Layer 2: the request-to-token map and the per-layer KV buffers.

`ReqToTokenPool.req_to_token[r, p]` is the KV slot of position p of the request held
in row r. `MHATokenToKVPool` holds per-layer K and V buffers `[size + 1, kv_heads,
head_dim]` (row 0 is the padding slot). Nothing here knows about models or trees.
"""

from __future__ import annotations

from typing import Optional

import torch


class ReqToTokenPool:
    def __init__(self, size: int, max_context_len: int, device: torch.device | str = "cpu") -> None:
        self.size = size
        self.max_context_len = max_context_len
        self.device = torch.device(device)
        self.req_to_token = torch.zeros((size, max_context_len), dtype=torch.int32, device=self.device)
        self.clear()

    def clear(self) -> None:
        self.free_rows: list[int] = list(range(self.size))

    def available_size(self) -> int:
        return len(self.free_rows)

    def alloc(self, need: int) -> Optional[list[int]]:
        if need > len(self.free_rows):
            return None
        rows, self.free_rows = self.free_rows[:need], self.free_rows[need:]
        return rows

    def free(self, rows: int | list[int]) -> None:
        self.free_rows.extend([rows] if isinstance(rows, int) else rows)

    def write(self, row: int, start: int, slots: torch.Tensor) -> None:
        self.req_to_token[row, start:start + slots.numel()] = slots.to(torch.int32)


class MHATokenToKVPool:
    def __init__(self, size: int, dtype: torch.dtype, head_num: int, head_dim: int, layer_num: int,
                 device: torch.device | str = "cpu", v_head_dim: Optional[int] = None) -> None:
        self.size = size
        self.dtype = dtype
        self.head_num = head_num
        self.head_dim = head_dim
        self.v_head_dim = v_head_dim or head_dim
        self.layer_num = layer_num
        self.device = torch.device(device)
        shape_k = (size + 1, head_num, head_dim)
        shape_v = (size + 1, head_num, self.v_head_dim)
        self.k_buffer = [torch.zeros(shape_k, dtype=dtype, device=self.device) for _ in range(layer_num)]
        self.v_buffer = [torch.zeros(shape_v, dtype=dtype, device=self.device) for _ in range(layer_num)]

    def get_kv_buffer(self, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.k_buffer[layer_id], self.v_buffer[layer_id]

    def set_kv_buffer(self, layer_id: int, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        self.k_buffer[layer_id][loc] = k.to(self.dtype)
        self.v_buffer[layer_id][loc] = v.to(self.dtype)

    @staticmethod
    def bytes_per_token(head_num: int, head_dim: int, layer_num: int, dtype: torch.dtype) -> int:
        return 2 * head_num * head_dim * layer_num * torch.empty((), dtype=dtype).element_size()
