"""radixlm's kernels: Triton implementations with a pure-torch reference for each (`reference`).

On a machine without a GPU, set `TRITON_INTERPRET=1` before importing this package to run
the kernels (slowly, on float32 CPU tensors) under Triton's interpreter.
"""

from radixlm_kernel.activation import silu_and_mul
from radixlm_kernel.argmax import argmax
from radixlm_kernel.cascade_attention import CascadePlan, cascade_plan, members_per_block
from radixlm_kernel.decode_attention import decode_attention_fwd, decode_launch_variant, kv_heads_per_program
from radixlm_kernel.decode_splits import compute_num_kv_splits, grid_kv_splits, longest_first_order, prefix_order
from radixlm_kernel.decode_rope import DecodeRope
from radixlm_kernel.extend_attention import extend_attention_fwd
from radixlm_kernel.gemv import linear_gemv, rmsnorm_gemv, silu_mul_gemv
from radixlm_kernel.kv_cache import store_kv_cache
from radixlm_kernel.norm import fused_add_rmsnorm, rmsnorm
from radixlm_kernel.rotary import apply_rotary_pos_emb_, apply_rotary_pos_emb_and_store_kv_
from radixlm_kernel.sampling import top_k_top_p_min_p_sampling

__all__ = [
    "apply_rotary_pos_emb_",
    "apply_rotary_pos_emb_and_store_kv_",
    "argmax",
    "CascadePlan",
    "cascade_plan",
    "compute_num_kv_splits",
    "decode_attention_fwd",
    "decode_launch_variant",
    "DecodeRope",
    "extend_attention_fwd",
    "fused_add_rmsnorm",
    "grid_kv_splits",
    "kv_heads_per_program",
    "linear_gemv",
    "longest_first_order",
    "members_per_block",
    "prefix_order",
    "rmsnorm",
    "rmsnorm_gemv",
    "silu_and_mul",
    "silu_mul_gemv",
    "store_kv_cache",
    "top_k_top_p_min_p_sampling",
]
