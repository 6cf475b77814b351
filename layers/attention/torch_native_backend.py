"""The reference attention backend: PyTorch SDPA, correct on any device (the CPU path).

Extend runs one SDPA per request (new tokens see the cached prefix and, causally, each
other). Decode gathers every request's context into one padded batch and masks the
padding, so it is a single SDPA call per layer; when all requests share a long prefix of
KV slots (one system prompt), `shared_prefix_decode` attends to it once for all of them.
An extend's last queries (`forward_extend_last`) take the padded decode SDPA.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from radixlm.layers.attention.base import AttentionBackend, register_attention_backend
from radixlm.layers.attention.shared_prefix_decode import (MIN_SHARED_PREFIX, shared_prefix_decode,
                                                           shared_prefix_len)

if TYPE_CHECKING:
    from radixlm.layers.radix_attention import RadixAttention
    from radixlm.model_executor.forward_batch import ForwardBatch


@register_attention_backend("torch_native")
class TorchNativeAttnBackend(AttentionBackend):
    supports_extend_last = True

    def __init__(self, model_runner: object = None) -> None:
        self.model_runner = model_runner

    def forward_extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        _save_kv(k, v, layer, forward_batch, save_kv_cache)
        k_buf, v_buf = forward_batch.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        req_to_token = forward_batch.req_to_token_pool.req_to_token
        out = q.new_empty(q.shape[0], layer.tp_q_head_num * layer.v_head_dim)
        start = 0
        for i, (prefix, ext, seq) in enumerate(zip(forward_batch.extend_prefix_lens_cpu,
                                                   forward_batch.extend_seq_lens_cpu, forward_batch.seq_lens_cpu)):
            if ext == 0:
                continue
            slots = req_to_token[forward_batch.req_pool_indices[i], :seq].long()
            qi = q[start:start + ext].view(ext, layer.tp_q_head_num, layer.head_dim).transpose(0, 1)
            ki = k_buf.index_select(0, slots).transpose(0, 1).to(q.dtype)
            vi = v_buf.index_select(0, slots).transpose(0, 1).to(q.dtype)
            if prefix == 0:
                oi = F.scaled_dot_product_attention(qi, ki, vi, is_causal=True, scale=layer.scaling, enable_gqa=True)
            else:
                cols = torch.arange(seq, device=q.device)
                rows = torch.arange(prefix, prefix + ext, device=q.device)
                mask = cols.unsqueeze(0) <= rows.unsqueeze(1)
                oi = F.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, scale=layer.scaling, enable_gqa=True)
            out[start:start + ext] = oi.transpose(0, 1).reshape(ext, -1)
            start += ext
        return out

    def forward_decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        _save_kv(k, v, layer, forward_batch, save_kv_cache)
        k_buf, v_buf = forward_batch.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        slots = _context_slots(forward_batch)
        shared = forward_batch.extras.get("shared_prefix_len")
        if shared is None:  # once per forward, not per layer; CPU only (it reads a value to the host)
            shared = shared_prefix_len(slots, forward_batch.seq_lens) if q.device.type == "cpu" else 0
            forward_batch.extras["shared_prefix_len"] = shared
        if shared >= MIN_SHARED_PREFIX:
            return shared_prefix_decode(q, k_buf, v_buf, slots, forward_batch.seq_lens, shared,
                                        layer.tp_q_head_num, layer.scaling)
        return _padded_decode(q, k_buf, v_buf, slots, layer, forward_batch)

    def forward_extend_last(self, q_last: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                            forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        """The padded decode SDPA: each row reads its request's first `seq_lens` slots, so cached prefixes
        and MIXED batches' decode rows (1-token extends) need nothing more. Not the shared-prefix split:
        its log-sum-exp merge adds rounding that the full layer's extend SDPA does not have."""
        _save_kv(k, v, layer, forward_batch, save_kv_cache)
        k_buf, v_buf = forward_batch.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        return _padded_decode(q_last, k_buf, v_buf, _context_slots(forward_batch), layer, forward_batch)


def _context_slots(forward_batch: "ForwardBatch") -> torch.Tensor:
    """Each request's KV slots, `[bs, max seq_len]`: columns past a request's `seq_lens` are padding."""
    max_len = max(forward_batch.seq_lens_cpu)
    return forward_batch.req_to_token_pool.req_to_token[forward_batch.req_pool_indices, :max_len].long()


def _padded_decode(q: torch.Tensor, k_buf: torch.Tensor, v_buf: torch.Tensor, slots: torch.Tensor,
                   layer: "RadixAttention", forward_batch: "ForwardBatch") -> torch.Tensor:
    """q `[bs, Hq*D]`, one query per request over its `seq_lens` slots (`slots` `[bs, max_len]`, padded and
    masked): one SDPA call. Returns `[bs, Hq*Dv]`."""
    bs, max_len = slots.shape
    kb = _gather(k_buf, slots).permute(0, 2, 1, 3).to(q.dtype)  # [bs, Hkv, L, D]
    vb = _gather(v_buf, slots).permute(0, 2, 1, 3).to(q.dtype)
    qb = q.view(bs, layer.tp_q_head_num, 1, layer.head_dim)
    valid = torch.arange(max_len, device=q.device).unsqueeze(0) < forward_batch.seq_lens.unsqueeze(1)
    o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=valid[:, None, None, :], scale=layer.scaling,
                                       enable_gqa=True)
    return o.reshape(bs, layer.tp_q_head_num * layer.v_head_dim)


def _gather(buf: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """buf[slots] for 2-D slots via index_select (several times faster than advanced indexing on CPU)."""
    return buf.index_select(0, slots.reshape(-1)).view(*slots.shape, *buf.shape[1:])


def _save_kv(k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention", forward_batch: "ForwardBatch",
             save_kv_cache: bool) -> None:
    if not save_kv_cache:
        return
    n = k.shape[0]
    forward_batch.token_to_kv_pool.set_kv_buffer(
        layer.layer_id, forward_batch.out_cache_loc,
        k.view(n, layer.tp_k_head_num, layer.head_dim), v.view(n, layer.tp_v_head_num, layer.v_head_dim))
