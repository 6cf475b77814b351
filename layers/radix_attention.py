"""RadixAttention: one attention layer over the paged KV pool, delegated to the batch's backend.

The backend writes the new K/V at `forward_batch.out_cache_loc` and reads each request's
context through `req_to_token`; this layer only carries the shapes and the layer id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
from torch import nn

if TYPE_CHECKING:
    from radixlm.layers.rotary_embedding import RotaryEmbedding
    from radixlm.model_executor.forward_batch import ForwardBatch


class RadixAttention(nn.Module):
    def __init__(self, num_heads: int, head_dim: int, scaling: float, num_kv_heads: int, layer_id: int,
                 v_head_dim: int = -1) -> None:
        super().__init__()
        self.tp_q_head_num = num_heads  # heads held by this rank
        self.tp_k_head_num = self.tp_v_head_num = num_kv_heads
        self.head_dim = self.qk_head_dim = head_dim
        self.v_head_dim = v_head_dim if v_head_dim != -1 else head_dim
        self.scaling = scaling
        self.layer_id = layer_id

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, forward_batch: "ForwardBatch",
                save_kv_cache: bool = True, rope: Optional["RotaryEmbedding"] = None) -> torch.Tensor:
        """q `[T, Hq*D]`, k/v `[T, Hkv*D]` -> `[T, Hq*Dv]`. With `rope` (see `takes_rope`) q/k are not
        rotated yet and the backend rotates them and stores k/v."""
        return forward_batch.attn_backend.forward(q, k, v, self, forward_batch, save_kv_cache, rope)

    def forward_extend_last(self, q_last: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        """An extend where only each request's last new token is read: k/v `[T, Hkv*D]` (all new tokens, stored),
        q_last `[bs, Hq*D]` -> `[bs, Hq*Dv]` (see `AttentionBackend.forward_extend_last`)."""
        return forward_batch.attn_backend.forward_extend_last(q_last, k, v, self, forward_batch, save_kv_cache)

    def takes_rope(self, forward_batch: "ForwardBatch") -> bool:
        """Whether this batch's backend folds the rotary embedding and the KV store into attention."""
        return forward_batch.attn_backend.takes_decode_rope(forward_batch)

    def kv_store_target(self, forward_batch: "ForwardBatch") -> Optional[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """`(k_buffer, v_buffer, out_cache_loc)` where a fused rotary kernel may write this layer's new
        K/V (then call `forward(..., save_kv_cache=False)`), or None when the backend stores them itself."""
        if not getattr(forward_batch.attn_backend, "accepts_stored_kv", False):
            return None
        k_buffer, v_buffer = forward_batch.token_to_kv_pool.get_kv_buffer(self.layer_id)
        return k_buffer, v_buffer, forward_batch.out_cache_loc
