"""The attention-backend interface and its registry.

A backend writes the new tokens' K/V into the KV pool at `forward_batch.out_cache_loc`
(when `save_kv_cache`), then attends over each request's slots read through
`req_to_token[req_pool_indices[i], :seq_lens[i]]`:
- extend: request i has `extend_prefix_lens[i]` cached tokens and `extend_seq_lens[i]` new
  ones; new token j attends to the whole prefix and causally to new tokens 0..j.
- decode: one new token per request attends to all `seq_lens[i]` tokens (itself included).
- extend, last query only (`forward_extend_last`): every new token's K/V are stored, but only
  each request's last new token attends (to all `seq_lens[i]` tokens, as a decode would),
  for a model layer whose other rows nobody reads.

Tensors: q `[num_tokens, num_heads * head_dim]`, k and v `[num_tokens, num_kv_heads *
head_dim]`; the result is `[num_tokens, num_heads * v_head_dim]`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from radixlm.layers.radix_attention import RadixAttention
    from radixlm.layers.rotary_embedding import RotaryEmbedding
    from radixlm.model_executor.forward_batch import ForwardBatch


class AttentionBackend(ABC):
    # True when the backend reads new K/V from the standard pool layout, so a fused rotary+store
    # kernel may write them before `forward(..., save_kv_cache=False)` (see RadixAttention.kv_store_target)
    accepts_stored_kv: bool = False
    # False when a CUDA-graph replay needs no host-side planning (everything is recorded in the graph),
    # so the graph runner skips building the padded batch for `init_forward_metadata_replay_cuda_graph`
    plans_replay_on_host: bool = True
    # True when `forward_extend_last` is implemented; a model asks before skipping its last layer's unread rows
    supports_extend_last: bool = False

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        """Precompute per-batch metadata once, before the layers run."""

    @abstractmethod
    def forward_extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor: ...

    @abstractmethod
    def forward_decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor: ...

    def forward_extend_last(self, q_last: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                            forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        """An extend batch of which only each request's last new token's output is read. k/v `[num_tokens,
        Hkv*D]` are every new token's (rotated), stored at out_cache_loc when `save_kv_cache`; q_last `[bs,
        Hq*D]` is each request's last new token (position `seq_lens[i] - 1`), which attends to its whole
        context `[0, seq_lens[i])` once the new K/V are in the pool. Returns `[bs, Hq*Dv]`.

        No generic default: attending "as a decode would" needs decode metadata, which each backend plans
        in its own way in `init_forward_metadata` (and did for an extend here). Backends that implement it
        set `supports_extend_last`; for the others the model runs the whole layer."""
        raise NotImplementedError(f"{type(self).__name__} does not attend for the last extend token only")

    def warm_up(self, model_runner: object) -> int:
        """Before serving: run the kernels whose compiled variant depends on the batch once per variant, so
        that none compiles on a live batch. Returns how many launches it made (0: nothing to warm)."""
        return 0

    def takes_decode_rope(self, forward_batch: "ForwardBatch") -> bool:
        """True when `forward(..., rope=...)` on this batch rotates q/k and stores k/v itself (one kernel
        for rotary, store and attention), so the layer passes q/k un-rotated."""
        return False

    def forward_decode_rope(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                            forward_batch: "ForwardBatch", rope: "RotaryEmbedding") -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} does not fold the rotary embedding into decode")

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                forward_batch: "ForwardBatch", save_kv_cache: bool = True,
                rope: "RotaryEmbedding | None" = None) -> torch.Tensor:
        """With `rope` (only where `takes_decode_rope`), q/k are un-rotated and the backend stores k/v."""
        if rope is not None:
            return self.forward_decode_rope(q, k, v, layer, forward_batch, rope)
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
        return self.forward_extend(q, k, v, layer, forward_batch, save_kv_cache)

    # CUDA-graph hooks (decode only). Backends that support graphs override these.
    def init_cuda_graph_state(self, max_bs: int) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not support CUDA graphs")

    def init_forward_metadata_capture_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        raise NotImplementedError

    def init_forward_metadata_in_graph(self, forward_batch: "ForwardBatch") -> None:
        """Device-only metadata work recorded inside the captured graph (runs again on every replay)."""

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        raise NotImplementedError


ATTENTION_BACKENDS: dict[str, Callable[..., AttentionBackend]] = {}


def register_attention_backend(name: str) -> Callable:
    def wrap(factory: Callable[..., AttentionBackend]) -> Callable[..., AttentionBackend]:
        ATTENTION_BACKENDS[name] = factory
        return factory

    return wrap


def create_attention_backend(name: str, model_runner) -> AttentionBackend:
    """Build a backend by name; importing the module registers it."""
    import importlib

    module = {"torch_native": "torch_native_backend", "triton": "triton_backend",
              "flashinfer": "flashinfer_backend"}.get(name)
    if module is None:
        raise ValueError(f"unknown attention backend {name!r}; choose from torch_native, triton, flashinfer")
    importlib.import_module(f"radixlm.layers.attention.{module}")
    return ATTENTION_BACKENDS[name](model_runner)
