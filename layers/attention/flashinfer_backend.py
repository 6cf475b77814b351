"""The `flashinfer` attention backend: FlashInfer's paged kernels over the page-size-1 KV pool.

Page size 1: a request's KV pages are its slots `req_to_token[req_pool_indices[i], :seq_lens[i]]`,
so `kv_indptr = cumsum(seq_lens)`, `kv_indices` is those rows concatenated (gathered on the
device by `build_kv_indices`) and every last page holds one token. The pool's per-layer
`[num_slots, H, D]` buffers go in as `[num_slots, 1, H, D]` views (NHD layout, no copies).

Per forward, `init_forward_metadata` plans one wrapper: decode (tensor cores from a GQA group
of 4), or prefill over prefix + new tokens with a causal mask (it aligns the new tokens to the
end of each request's KV). Each layer then writes its new K/V into the pool (unless a fused
rotary kernel already did: `accepts_stored_kv`) and runs the wrapper. The planner's host-side
lengths come from `seq_lens_cpu` / `extend_seq_lens_cpu`, so planning never waits for the
device. FlashInfer takes the softmax scale (and the query dtype) at plan time: the plan uses
the ones layers last brought (at first `head_dim ** -0.5` and the model dtype) and a layer
that brings others re-plans, which graph capture refuses.

CUDA graphs (decode): `init_cuda_graph_state` allocates static indptr / indices / last-page
buffers; each captured batch size gets its own `use_cuda_graph=True` wrapper over them, and
the replay hook re-plans that wrapper from the padded batch's host lengths.

Without FlashInfer (not installed, a CPU device, or dtypes it does not serve) asking for
`flashinfer` logs one warning and builds the device's default backend instead: `triton` on
CUDA, `torch_native` on CPU (what `ServerArgs.resolved()` picks).
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

import torch

from radixlm.layers.attention.base import AttentionBackend, create_attention_backend, register_attention_backend

if TYPE_CHECKING:
    from radixlm.layers.radix_attention import RadixAttention
    from radixlm.model_executor.forward_batch import ForwardBatch

logger = logging.getLogger(__name__)

WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended float workspace, shared by every wrapper
TENSOR_CORE_MIN_GQA_GROUP = 4  # from this many query heads per KV head, tensor-core decode is faster
SERVED_DTYPES = (torch.float16, torch.bfloat16)


@register_attention_backend("flashinfer")
def create_flashinfer_backend(model_runner: Any) -> AttentionBackend:
    """FlashInferAttnBackend, or the device's default backend (with one warning) when FlashInfer cannot serve."""
    device = torch.device(model_runner.device)
    reason = flashinfer_unavailable_reason(device, _q_dtype(model_runner), model_runner.token_to_kv_pool.dtype)
    if reason is None:
        return FlashInferAttnBackend(model_runner)
    fallback = "triton" if device.type == "cuda" else "torch_native"
    logger.warning("flashinfer attention backend not available (%s); falling back to %s", reason, fallback)
    return create_attention_backend(fallback, model_runner)


def flashinfer_unavailable_reason(device: torch.device, q_dtype: torch.dtype, kv_dtype: torch.dtype) -> Optional[str]:
    """Why FlashInfer cannot run attention here, or None when it can."""
    if device.type != "cuda":
        return f"device is {device.type}"
    if q_dtype not in SERVED_DTYPES or kv_dtype != q_dtype:
        return f"it serves float16/bfloat16 with a KV cache of the same dtype, not {q_dtype} with {kv_dtype}"
    try:
        import flashinfer  # noqa: F401
    except (ImportError, OSError, RuntimeError) as e:  # a broken CUDA install fails with the latter two
        return f"cannot import flashinfer: {e}"
    return None


def build_kv_indices(req_to_token: torch.Tensor, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
                     total: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """The page-size-1 `kv_indices`: row `req_pool_indices[i]` of req_to_token, first `seq_lens[i]` slots, for
    every i, concatenated (`total = sum(seq_lens)`, known on the host). Runs on the inputs' device without a
    host sync; writes into `out[:total]` when given."""
    req = torch.repeat_interleave(seq_lens, output_size=total)  # [0]*seq_lens[0] + [1]*seq_lens[1] + ...
    starts = torch.cumsum(seq_lens, 0) - seq_lens
    pos = torch.arange(total, device=req_to_token.device) - starts[req]
    indices = req_to_token[req_pool_indices[req], pos]
    if out is None:
        return indices
    out[:total].copy_(indices)
    return out[:total]


@dataclass
class PlannedWrapper:
    """A wrapper with what `plan()` needs to plan it again for another softmax scale or query dtype."""
    wrapper: Any  # flashinfer.BatchDecodeWithPagedKVCacheWrapper or BatchPrefillWithPagedKVCacheWrapper
    decode: bool
    args: tuple  # plan()'s positional arguments
    kwargs: dict = field(default_factory=dict)  # plan()'s keywords other than sm_scale and the dtypes
    key: Optional[tuple[float, torch.dtype]] = None  # (sm_scale, q dtype) of the last plan


class FlashInferAttnBackend(AttentionBackend):
    accepts_stored_kv = True  # attention reads every K/V, new ones included, from the pool

    def __init__(self, model_runner: Any) -> None:
        import flashinfer

        self.flashinfer = flashinfer
        pool = model_runner.token_to_kv_pool
        self.device = torch.device(model_runner.device)
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.num_q_heads = model_runner.model_config.num_attention_heads // getattr(model_runner, "tp_size", 1)
        self.num_kv_heads, self.head_dim, self.v_head_dim = pool.head_num, pool.head_dim, pool.v_head_dim
        self.kv_dtype = pool.dtype
        self.plan_key = (self.head_dim ** -0.5, _q_dtype(model_runner))
        self.use_tensor_cores = self.num_q_heads // self.num_kv_heads >= TENSOR_CORE_MIN_GQA_GROUP
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=self.device)
        self.decode_wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace, "NHD", use_tensor_cores=self.use_tensor_cores)
        self.prefill_wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD")
        self.graph_wrappers: dict[int, Any] = {}
        self.graph_kv_indices: Optional[torch.Tensor] = None
        self.forward_metadata: Optional[PlannedWrapper] = None

    # ---- metadata ------------------------------------------------------------------------

    def init_forward_metadata(self, forward_batch: "ForwardBatch") -> None:
        if forward_batch.forward_mode.is_decode():
            self.forward_metadata = self._plan_decode(forward_batch, self.decode_wrapper)
        else:
            self.forward_metadata = self._plan_extend(forward_batch)

    def _plan_decode(self, fb: "ForwardBatch", wrapper: Any, indices_out: Optional[torch.Tensor] = None
                     ) -> PlannedWrapper:
        bs = fb.batch_size
        kv_indptr = _indptr(fb.seq_lens_cpu[:bs])
        kv_indices = build_kv_indices(self.req_to_token, fb.req_pool_indices[:bs], fb.seq_lens[:bs],
                                      int(kv_indptr[-1]), out=indices_out)
        args = (kv_indptr, kv_indices, _ones(bs), self.num_q_heads, self.num_kv_heads, self.head_dim, 1)
        return self._plan(PlannedWrapper(wrapper, True, args))

    def _plan_extend(self, fb: "ForwardBatch") -> PlannedWrapper:
        kv_indptr = _indptr(fb.seq_lens_cpu)
        kv_indices = build_kv_indices(self.req_to_token, fb.req_pool_indices, fb.seq_lens, int(kv_indptr[-1]))
        args = (_indptr(fb.extend_seq_lens_cpu), kv_indptr, kv_indices, _ones(fb.batch_size), self.num_q_heads,
                self.num_kv_heads, self.head_dim, 1)
        return self._plan(PlannedWrapper(self.prefill_wrapper, False, args,
                                         dict(head_dim_vo=self.v_head_dim, causal=True)))

    def _plan(self, planned: PlannedWrapper) -> PlannedWrapper:
        sm_scale, q_dtype = self.plan_key
        planned.wrapper.plan(*planned.args, **planned.kwargs, sm_scale=sm_scale, q_data_type=q_dtype,
                             kv_data_type=self.kv_dtype)
        planned.key = self.plan_key
        return planned

    # ---- CUDA graphs (decode) -----------------------------------------------------------

    def init_cuda_graph_state(self, max_bs: int) -> None:
        # a request's KV is at most one req_to_token row, and shared prefixes repeat slots across requests,
        # so the bound is rows x row width, not the pool's slot count
        max_context = self.req_to_token.shape[1]
        self.graph_kv_indptr = torch.zeros(max_bs + 1, dtype=torch.int32, device=self.device)
        self.graph_kv_indices = torch.zeros(max_bs * max_context, dtype=torch.int32, device=self.device)
        self.graph_last_page_len = torch.ones(max_bs, dtype=torch.int32, device=self.device)

    def init_forward_metadata_capture_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        if self.graph_kv_indices is None:
            raise RuntimeError("call init_cuda_graph_state(max_bs) before capturing")
        bs = forward_batch.batch_size
        if bs not in self.graph_wrappers:
            self.graph_wrappers[bs] = self.flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_cuda_graph=True, use_tensor_cores=self.use_tensor_cores,
                paged_kv_indptr_buffer=self.graph_kv_indptr[:bs + 1], paged_kv_indices_buffer=self.graph_kv_indices,
                paged_kv_last_page_len_buffer=self.graph_last_page_len[:bs])
        self.forward_metadata = self._plan_decode(forward_batch, self.graph_wrappers[bs], self.graph_kv_indices)

    def init_forward_metadata_replay_cuda_graph(self, forward_batch: "ForwardBatch") -> None:
        """`forward_batch` is the padded static batch; its `seq_lens_cpu` must hold the real lengths."""
        wrapper = self.graph_wrappers[forward_batch.batch_size]
        self.forward_metadata = self._plan_decode(forward_batch, wrapper, self.graph_kv_indices)

    # ---- forward --------------------------------------------------------------------------

    def forward_extend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        return self._attend(False, q, k, v, layer, forward_batch, save_kv_cache)

    def forward_decode(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                       forward_batch: "ForwardBatch", save_kv_cache: bool = True) -> torch.Tensor:
        return self._attend(True, q, k, v, layer, forward_batch, save_kv_cache)

    def _attend(self, decode: bool, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: "RadixAttention",
                forward_batch: "ForwardBatch", save_kv_cache: bool) -> torch.Tensor:
        meta = self.forward_metadata
        if meta is None or meta.decode != decode:
            raise RuntimeError(f"init_forward_metadata was not called for this {'decode' if decode else 'extend'} "
                               "batch")
        n = q.shape[0]
        pool = forward_batch.token_to_kv_pool
        if save_kv_cache:
            pool.set_kv_buffer(layer.layer_id, forward_batch.out_cache_loc,
                               k.view(n, layer.tp_k_head_num, layer.head_dim),
                               v.view(n, layer.tp_v_head_num, layer.v_head_dim))
        self._replan_for(meta, layer.scaling, q.dtype)
        k_buf, v_buf = pool.get_kv_buffer(layer.layer_id)
        q3 = q.contiguous().view(n, layer.tp_q_head_num, layer.head_dim)
        o = meta.wrapper.run(q3, (k_buf.unsqueeze(1), v_buf.unsqueeze(1)))  # pages of one slot
        return o.view(n, layer.tp_q_head_num * layer.v_head_dim)

    def _replan_for(self, meta: PlannedWrapper, sm_scale: float, q_dtype: torch.dtype) -> None:
        """Plan `meta` again if this layer's softmax scale or query dtype is not the one it was planned with."""
        key = (sm_scale, q_dtype)
        if meta.key == key:
            return
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"flashinfer was planned for (sm_scale, dtype) {meta.key} but a layer needs {key}; "
                               "plans cannot change inside a CUDA graph")
        self.plan_key = key
        self._plan(meta)


def _q_dtype(model_runner: Any) -> torch.dtype:
    return getattr(model_runner, "dtype", model_runner.token_to_kv_pool.dtype)


def _indptr(lens: list[int]) -> torch.Tensor:
    """Host int32 `[0, cumsum(lens)...]`: FlashInfer's planner reads indptrs on the host."""
    return torch.tensor([0, *itertools.accumulate(lens)], dtype=torch.int32)


def _ones(n: int) -> torch.Tensor:
    """Host last-page lengths: with page size 1 every last page holds one token."""
    return torch.ones(n, dtype=torch.int32)
