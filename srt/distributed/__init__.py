"""Tensor-parallel communication (identity at world size 1). See README.md in this folder."""

from radixlm.distributed.parallel_state import (
    all_gather_int,
    all_gather_pyobj,
    all_reduce_min_int,
    broadcast_pyobj,
    destroy_distributed,
    get_tp_cpu_group,
    get_tp_rank,
    get_tp_size,
    init_distributed,
    stable_hash,
    tensor_model_parallel_all_gather,
    tensor_model_parallel_all_reduce,
)

__all__ = [
    "all_gather_int", "all_gather_pyobj", "all_reduce_min_int", "broadcast_pyobj", "destroy_distributed",
    "get_tp_cpu_group", "get_tp_rank", "get_tp_size", "init_distributed", "stable_hash",
    "tensor_model_parallel_all_gather", "tensor_model_parallel_all_reduce",
]
