"""The `triton` attention backend: the project's own kernels from `radixlm_kernel` (sgl-kernel/).

Per forward: new K/V go into the pool with `store_kv_cache`, then extend runs
`extend_attention_fwd` (prefix through req_to_token, new tokens causally) and decode runs
`decode_attention_fwd` (flash-decoding; the kernels count each request's KV splits from its
length; a cascade batch's splits are computed on the device from the context past the prefix).
An extend whose last queries alone are read (`forward_extend_last`) stores every new K/V and runs
`decode_attention_fwd` for those queries, eager (no order, no cascade, kernel-allocated scratch, the split
grid `_eager_splits`). So do an extend batch's trailing one-token rows (a MIXED batch's running decodes):
the extend kernel runs for the rows before them only.
Outside cascade batches a decode takes q/k un-rotated (`takes_decode_rope`): the attention kernel rotates
them and stores the new k/v itself, one launch per layer instead of two. Decode
batches of at least CASCADE_MIN_BS requests first group requests that share a cached prefix
(`cascade_plan`, on the device): a group's prefix K/V is read once per block of requests and
each request attends the rest of its context on its own (cascade attention), longest first,
so that a long context does not run on alone after the short ones.

CUDA graphs (decode): `init_cuda_graph_state(max_bs)` allocates static buffers (splits per
request and the split-merge scratch); `init_forward_metadata_capture_cuda_graph` points
the metadata at them for the batch being captured; `init_forward_metadata_in_graph` records
the planning (cascade blocks and splits, launch order) from the graph's static `seq_lens` inside
the graph, so a replay launches nothing else. No step of the decode path reads a device value on
the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from radixlm import environ
from radixlm.layers.attention.base import AttentionBackend, register_attention_backend

if TYPE_CHECKING:
    from radixlm_kernel import CascadePlan, DecodeRope

    from radixlm.layers.radix_attention import RadixAttention
    from radixlm.layers.rotary_embedding import RotaryEmbedding
    from radixlm.model_executor.forward_batch import ForwardBatch

MAX_KV_SPLITS = 32
# The decode kernel's split grid outside CUDA graphs (an extend's last queries, a MIXED batch's decodes) for up to
# EAGER_MAX_BS rows: one value whatever the batch size, so these launches compile one kernel variant (the one the
# server's warm-up request compiles) instead of one per split count class (each a compile of ~1 s on first use,
# which stalled the first MIXED batches of a fresh server for 0.7-2.8 s each; RESULTS.md, twenty-fifth session).
# Rows get min(ceil(len / 64), 32) splits either way; programs past a row's count exit at once. Larger batches
# keep the sized grid: their kernel-allocated scratch grows with the grid (bs x 32 splits x Hq x Dv floats).
EAGER_KV_SPLITS = MAX_KV_SPLITS
EAGER_MAX_BS = 16
CASCADE_MIN_BS = 16  # smaller decode batches skip the grouping (its ~20 small launches per step)


@dataclass
class DecodeMetadata:
    num_kv_splits: Optional[torch.Tensor]  # int32 [bs] (cascade batches); None: from the lengths, in the kernel
    attn_logits: torch.Tensor  # float32 [>=bs, Hq, MAX_KV_SPLITS, Dv]
    attn_lse: torch.Tensor  # float32 [>=bs, Hq, MAX_KV_SPLITS]
    order: Optional[torch.Tensor] = None  # int64 [bs] launch order: prefix-sharing rows side by side, or
    # (cascade batches) the longest own contexts first
    cascade: Optional["CascadePlan"] = None  # shared-prefix blocks, when the batch is cascade-sized
    split_counters: Optional[torch.Tensor] = None  # int32 [>=bs, Hk], zeros: finished splits (fused merge)


@dataclass
class ExtendMetadata:
    extend_start_loc: torch.Tensor  # [bs] offsets of each request's new tokens
    max_len_extend: int  # of the first `prefill_rows` rows
    prefill_rows: int  # rows [prefill_rows, bs) have one new token each: they take the decode kernel
    tail_seq_lens: Optional[torch.Tensor] = None  # seq_lens[prefill_rows:] in a buffer of their own
    tail_pool_indices: Optional[torch.Tensor] = None  # req_pool_indices[prefill_rows:], likewise


def one_token_tail(ext_lens: list[int]) -> int:
    """How many rows at the end of an extend batch have exactly one new token (a MIXED batch puts its
    running decodes there). Their query attends its whole context, the new token included once stored,
    which is what the decode kernel computes with its KV splits; the extend kernel would give each a
    128-query tile of one real row that walks the whole context alone."""
    n = 0
    for length in reversed(ext_lens):
        if length != 1:
            break
        n += 1
    return n


@register_attention_backend("triton")
class TritonAttnBackend(AttentionBackend):
    accepts_stored_kv = True
    plans_replay_on_host = False
    supports_extend_last = True

    def __init__(self, model_runner: object) -> None:
        import radixlm_kernel  # the kernel package (pip install -e sgl-kernel)

        self.kernel = radixlm_kernel
        pool = model_runner.token_to_kv_pool
        cfg = model_runner.model_config
        self.device = torch.device(model_runner.device)
        self.num_kv_heads = pool.head_num
        self.kv_dtype = pool.dtype
        self.kv_fp8 = radixlm_kernel.utils.is_fp8(pool.dtype)  # the decode kernel's split knobs differ by dtype
        self.v_head_dim = pool.v_head_dim
        self.num_q_heads = cfg.num_attention_heads // getattr(model_runner, "tp_size", 1)
        self.num_sms = (torch.cuda.get_device_properties(self.device).multi_processor_count
                        if self.device.type == "cuda" else 8)
        self.forward_metadata: Optional[DecodeMetadata | ExtendMetadata] = None
        self.cascade_enabled = environ.decode_cascade()
        self.longest_first = environ.decode_longest_first()
        self.fused_rope = environ.decode_fused_rope()
        self.cascade_members = self.kernel.members_per_block(self.num_q_heads // self.num_kv_heads)
        self.cuda_graph_num_kv_splits: Optional[torch.Tensor] = None
        self.split_counters: Optional[torch.Tensor] = None

    # ---- metadata ------------------------------------------------------------------------

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        if forward_batch.forward_mode.is_decode():
            bs = forward_batch.batch_size
            meta = DecodeMetadata(None, *self._scratch(bs), split_counters=self._counters(bs))  # splits: planned below
            self._plan_decode(meta, forward_batch)
            self.forward_metadata = meta
            return
        ext = forward_batch.extend_seq_lens
        start = forward_batch.extend_start_loc
        if start is None:
            start = torch.cumsum(ext, dim=0) - ext
        ext_cpu = forward_batch.extend_seq_lens_cpu
        rows = len(ext_cpu) - one_token_tail(ext_cpu)
        meta = ExtendMetadata(start, max(ext_cpu[:rows], default=0), rows)
        if rows < len(ext_cpu):  # copies: a slice's address (16-byte aligned or not) would be another compile
            meta.tail_seq_lens = forward_batch.seq_lens[rows:].clone()
            meta.tail_pool_indices = forward_batch.req_pool_indices[rows:].clone()
        self.forward_metadata = meta

    def _use_cascade(self, forward_batch: "ForwardBatch") -> bool:
        """A host decision on the (padded) batch size only, so capture and replay agree."""
        return (self.cascade_enabled and forward_batch.batch_size >= CASCADE_MIN_BS
                and forward_batch.req_to_token_pool.req_to_token.shape[1] >= self.kernel.cascade_attention.MIN_SHARED)

    def _plan_decode(self, meta: DecodeMetadata, forward_batch: "ForwardBatch",
                     splits_out: Optional[torch.Tensor] = None, order_out: Optional[torch.Tensor] = None) -> None:
        """Device-only decode planning (the part a CUDA graph records): the shared-prefix blocks when
        the batch is cascade-sized, else the launch order; then the KV splits of what each request
        attends by itself."""
        bs = forward_batch.batch_size
        seq_lens = forward_batch.seq_lens[:bs]
        if self._use_cascade(forward_batch):
            meta.cascade = self.kernel.cascade_plan(forward_batch.req_to_token_pool.req_to_token,
                                                    forward_batch.req_pool_indices[:bs], seq_lens,
                                                    self.cascade_members)
            own = seq_lens - meta.cascade.pre_len
            # the shared prefixes are the cascade kernel's, so the rest can start longest first
            meta.order = self.kernel.longest_first_order(own, out=order_out) if self.longest_first else None
            meta.num_kv_splits = self.kernel.compute_num_kv_splits(own, self.num_kv_heads, self._split_cap(True),
                                                                   self.num_sms, out=splits_out,
                                                                   heads_per_program=self._heads_per_program(),
                                                                   fp8=self.kv_fp8)
        else:  # the decode kernels count each request's splits from its length (no launch for them)
            meta.order = self._order(forward_batch, out=order_out)
            meta.num_kv_splits = None

    def _split_cap(self, cascade: bool) -> int:
        """Split slots of the scratch a request's own context may use (the cascade reserves some)."""
        return MAX_KV_SPLITS - (self.kernel.cascade_attention.PREFIX_SPLITS if cascade else 0)

    def _order(self, forward_batch: "ForwardBatch", out: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
        """Requests that share their first KV slots (a cached prefix) decode side by side, so the
        prefix is read from HBM about once per step and from L2 by the rest (None at batch 1)."""
        if forward_batch.batch_size < 2:
            return None
        return self.kernel.prefix_order(forward_batch.req_to_token_pool.req_to_token,
                                        forward_batch.req_pool_indices, out=out)

    def _grid_splits(self, bs: int, cascade: bool = False) -> int:
        """The decode grid's split dimension for `bs` rows (what `_plan_decode`'s splits never exceed)."""
        return self.kernel.grid_kv_splits(bs, self.num_kv_heads, self._split_cap(cascade), self.num_sms,
                                          self._heads_per_program(), fp8=self.kv_fp8)

    def _eager_splits(self, bs: int) -> int:
        """The split grid of an eager decode launch of `bs` rows (see EAGER_KV_SPLITS)."""
        return EAGER_KV_SPLITS if bs <= EAGER_MAX_BS else self._grid_splits(bs)

    def _heads_per_program(self) -> int:
        """KV heads one decode program attends (a kernel knob per pool dtype; it sizes the grid)."""
        return self.kernel.kv_heads_per_program(self.num_kv_heads, self.kv_dtype)

    def _scratch(self, bs: int) -> tuple[torch.Tensor, torch.Tensor]:
        logits = torch.empty((bs, self.num_q_heads, MAX_KV_SPLITS, self.v_head_dim), dtype=torch.float32,
                             device=self.device)
        lse = torch.empty((bs, self.num_q_heads, MAX_KV_SPLITS), dtype=torch.float32, device=self.device)
        return logits, lse

    def _counters(self, bs: int) -> torch.Tensor:
        """The fused merge's arrival counters for eager decode steps: one zeroed buffer, grown when a
        larger batch comes (the kernel leaves it zero, so the next step reuses it). The graphs keep their
        own (`init_cuda_graph_state`), so growing this one never frees memory a graph writes."""
        if self.split_counters is None or self.split_counters.shape[0] < bs:
            self.split_counters = torch.zeros((bs, self.num_kv_heads), dtype=torch.int32, device=self.device)
        return self.split_counters

    def warm_up(self, model_runner: object) -> int:
        """Compile every variant of the eager decode launch that an extend's last queries and a MIXED batch's
        one-token rows use (`_eager_splits`): the variant follows the row count only, so one launch per
        variant over 1..max_running_requests rows covers them (read from request row 0, which holds slot 0
        before serving; the pool is only read). Decode batches in CUDA graphs compiled at capture."""
        k_buf, v_buf = model_runner.token_to_kv_pool.get_kv_buffer(0)
        req_to_token = model_runner.req_to_token_pool.req_to_token
        launch_for: dict[tuple, tuple[int, int]] = {}  # variant -> the first (rows, split grid) that takes it
        for bs in range(1, model_runner.max_running_requests + 1):
            splits = self._eager_splits(bs)
            launch_for.setdefault(self.kernel.decode_launch_variant(bs, splits, self.kv_dtype), (bs, splits))
        for bs, splits in launch_for.values():
            q = torch.zeros((bs, self.num_q_heads, k_buf.shape[-1]), dtype=model_runner.dtype, device=self.device)
            o = torch.empty((bs, self.num_q_heads, self.v_head_dim), dtype=model_runner.dtype, device=self.device)
            rows = torch.zeros(bs, dtype=torch.int64, device=self.device)
            self.kernel.decode_attention_fwd(q, k_buf, v_buf, o, req_to_token, rows, torch.ones_like(rows), None,
                                             1.0, max_kv_splits=splits)
        return len(launch_for)

    # ---- CUDA graphs (decode) -----------------------------------------------------------

    def init_cuda_graph_state(self, max_bs: int) -> None:
        self.cuda_graph_num_kv_splits = torch.ones(max_bs, dtype=torch.int32, device=self.device)
        self.cuda_graph_order = torch.arange(max_bs, dtype=torch.int64, device=self.device)
        self.cuda_graph_attn_logits, self.cuda_graph_attn_lse = self._scratch(max_bs)
        self.cuda_graph_split_counters = torch.zeros((max_bs, self.num_kv_heads), dtype=torch.int32,
                                                     device=self.device)  # the kernel leaves them zero

    def init_forward_metadata_capture_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        if self.cuda_graph_num_kv_splits is None:
            raise RuntimeError("call init_cuda_graph_state(max_bs) before capturing")
        bs = forward_batch.batch_size
        self.forward_metadata = DecodeMetadata(self.cuda_graph_num_kv_splits[:bs], self.cuda_graph_attn_logits,
                                               self.cuda_graph_attn_lse, split_counters=self.cuda_graph_split_counters)

    def init_forward_metadata_in_graph(self, forward_batch: "ForwardBatch") -> None:
        """The shared-prefix blocks, the launch order and the splits follow the graph's static
        seq_lens and rows, so computing them is part of the graph."""
        meta = self.forward_metadata
        if not isinstance(meta, DecodeMetadata):
            raise RuntimeError("init_forward_metadata_capture_cuda_graph was not called")
        self._plan_decode(meta, forward_batch, splits_out=self.cuda_graph_num_kv_splits,
                          order_out=self.cuda_graph_order)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        """Nothing on the host: the captured graph recomputes the splits from the static seq_lens."""

    # ---- forward --------------------------------------------------------------------------

    def forward_extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        meta = self.forward_metadata
        if not isinstance(meta, ExtendMetadata):
            raise RuntimeError("init_forward_metadata was not called for this extend batch")
        k3, v3 = self._save_kv(k, v, layer, forward_batch, save_kv_cache)
        k_buf, v_buf = forward_batch.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        o = q.new_empty(q.shape[0], layer.tp_q_head_num, layer.v_head_dim)
        q3 = q.view(q.shape[0], layer.tp_q_head_num, layer.head_dim)
        rows, fb = meta.prefill_rows, forward_batch
        if rows:
            self.kernel.extend_attention_fwd(
                q3, k3, v3, o, k_buf, v_buf, fb.req_to_token_pool.req_to_token, fb.req_pool_indices[:rows],
                fb.seq_lens[:rows], fb.extend_seq_lens[:rows], meta.extend_start_loc[:rows], meta.max_len_extend,
                layer.scaling)
        tail = 0 if meta.tail_seq_lens is None else meta.tail_seq_lens.shape[0]
        if tail:  # one new token per row, the last `tail` tokens of q: the decode kernel over the pool
            self.kernel.decode_attention_fwd(
                q3[-tail:], k_buf, v_buf, o[-tail:], fb.req_to_token_pool.req_to_token, meta.tail_pool_indices,
                meta.tail_seq_lens, None, layer.scaling, max_kv_splits=self._eager_splits(tail))
        return o.view(q.shape[0], -1)

    def forward_decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True,
                       rope: Optional["DecodeRope"] = None) -> torch.Tensor:
        meta = self.forward_metadata
        if not isinstance(meta, DecodeMetadata):
            raise RuntimeError("init_forward_metadata was not called for this decode batch")
        self._save_kv(k, v, layer, forward_batch, save_kv_cache)
        return self._decode_attention(
            q, layer, forward_batch, meta.num_kv_splits, self._grid_splits(q.shape[0], meta.cascade is not None),
            attn_logits=meta.attn_logits, attn_lse=meta.attn_lse, order=meta.order, cascade=meta.cascade,
            num_sms=self.num_sms, split_counters=meta.split_counters, rope=rope)

    def forward_extend_last(self, q_last: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                            forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        """The decode kernel over each request's whole context (the pool holds the new K/V once stored); the
        extend's metadata plans nothing for it, so the kernel counts the splits and allocates its scratch."""
        self._save_kv(k, v, layer, forward_batch, save_kv_cache)
        return self._decode_attention(q_last, layer, forward_batch, None, self._eager_splits(q_last.shape[0]))

    def _decode_attention(self, q: torch.Tensor, layer: "RadixAttention", forward_batch: "ForwardBatch",
                          num_kv_splits: Optional[torch.Tensor], max_kv_splits: int, **launch: object) -> torch.Tensor:
        """`decode_attention_fwd`: q `[bs, Hq*D]`, one query per request over its `seq_lens` slots in the
        pool -> `[bs, Hq*Dv]`; `launch` passes the kernel's optional scratch and planning arguments."""
        k_buf, v_buf = forward_batch.token_to_kv_pool.get_kv_buffer(layer.layer_id)
        bs = q.shape[0]
        o = q.new_empty(bs, layer.tp_q_head_num, layer.v_head_dim)
        self.kernel.decode_attention_fwd(
            q.view(bs, layer.tp_q_head_num, layer.head_dim), k_buf, v_buf, o,
            forward_batch.req_to_token_pool.req_to_token, forward_batch.req_pool_indices, forward_batch.seq_lens,
            num_kv_splits, layer.scaling, max_kv_splits=max_kv_splits, **launch)
        return o.view(bs, -1)

    def takes_decode_rope(self, forward_batch: "ForwardBatch") -> bool:
        """Decode batches outside the cascade (its prefix kernel reads the pool before the split kernel)."""
        return self.fused_rope and forward_batch.forward_mode.is_decode() and not self._use_cascade(forward_batch)

    def forward_decode_rope(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                            forward_batch: "ForwardBatch", rope: "RotaryEmbedding") -> torch.Tensor:
        rope_args = self.kernel.DecodeRope(k=k, v=v, loc=forward_batch.out_cache_loc,
                                           cos_sin_cache=rope.cos_sin_cache, is_neox=rope.is_neox_style)
        return self.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=False, rope=rope_args)

    def _save_kv(self, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention", forward_batch: "ForwardBatch",
                 save_kv_cache: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """`[T, H, D]` views of k and v, written into the pool at out_cache_loc when `save_kv_cache`."""
        n = k.shape[0]
        k3 = k.view(n, layer.tp_k_head_num, layer.head_dim)
        v3 = v.view(n, layer.tp_v_head_num, layer.v_head_dim)
        if save_kv_cache:
            k_buf, v_buf = forward_batch.token_to_kv_pool.get_kv_buffer(layer.layer_id)
            self.kernel.store_kv_cache(k_buf, v_buf, forward_batch.out_cache_loc, k3, v3)
        return k3, v3
