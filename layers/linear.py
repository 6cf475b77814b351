"""Tensor-parallel linear layers.

Column-parallel layers split the output dimension across ranks (no communication);
row-parallel layers split the input dimension and all-reduce the partial sums. Every
parameter carries `weight_loader(param, loaded_weight, shard_id=None)` which takes the
full checkpoint tensor, checks its shape against the config, and copies this rank's
slice. Fused layers name their pieces: QKV by "q"/"k"/"v", merged layers by index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.distributed import tensor_model_parallel_all_gather, tensor_model_parallel_all_reduce
from radixlm.layers.activation import silu_and_mul
from radixlm.layers.kernel_dispatch import gemv_kernel_for
from radixlm.layers.parameter import check_shape

if TYPE_CHECKING:
    from radixlm.layers.layernorm import RMSNorm


def divide(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise ValueError(f"{what} ({numerator}) is not divisible by tp_size ({denominator})")
    return numerator // denominator


class LinearBase(nn.Module):
    def __init__(self, in_features: int, out_features: int, bias: bool, tp_rank: int, tp_size: int,
                 gemv_op: str = "") -> None:
        super().__init__()
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.gemv_op = gemv_op  # the projection's name for kernel_dispatch.CUDA_GEMV_OPS ("": no restriction)
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.weight.weight_loader = self.weight_loader
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None
        if self.bias is not None:
            self.bias.weight_loader = self.weight_loader

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
        raise NotImplementedError


class ColumnParallelLinear(LinearBase):
    """y = x W^T (+ b) with W split by output rows; `gather_output` concatenates the rank outputs."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False, gather_output: bool = False,
                 tp_rank: int = 0, tp_size: int = 1, gemv_op: str = "") -> None:
        self.output_size = output_size
        self.output_size_per_partition = divide(output_size, tp_size, "output size")
        super().__init__(input_size, self.output_size_per_partition, bias, tp_rank, tp_size, gemv_op)
        self.gather_output = gather_output

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._gather(F.linear(x, self.weight, self.bias))

    def forward_normed(self, x: torch.Tensor, residual: Optional[torch.Tensor], norm: "RMSNorm"
                       ) -> tuple[torch.Tensor, torch.Tensor]:
        """`(forward(norm(x + residual)), x + residual)`; with residual None (the first layer)
        `(forward(norm(x)), x)`. Small CUDA batches run it as one kernel, the norm the GEMV's prologue."""
        kernel = gemv_kernel_for(x, self.weight, self.gemv_op)
        if kernel is not None and (residual is None or residual.stride(-1) == 1):
            out, residual = kernel.rmsnorm_gemv(x, residual, norm.weight, norm.variance_epsilon, self.weight,
                                                self.bias)
            return self._gather(out), residual
        if residual is None:
            return self.forward(norm(x)), x
        x, residual = norm(x, residual)
        return self.forward(x), residual

    def _gather(self, out: torch.Tensor) -> torch.Tensor:
        return tensor_model_parallel_all_gather(out, dim=-1) if self.gather_output else out

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
        if shard_id is not None:
            raise ValueError(f"{type(self).__name__} is not packed; got shard {shard_id!r}")
        full = (self.output_size,) + tuple(param.shape[1:])
        check_shape(type(self).__name__, full, loaded_weight)
        n = self.output_size_per_partition
        param.data.copy_(loaded_weight.narrow(0, self.tp_rank * n, n))

    def _load_piece(self, param: nn.Parameter, loaded_weight: torch.Tensor, desc: str, full_rows: int,
                    dst_offset: int, rows: int, src_rank: int) -> None:
        """Copy rows [src_rank*rows, +rows) of a full piece into param rows [dst_offset, +rows)."""
        check_shape(desc, (full_rows,) + tuple(param.shape[1:]), loaded_weight)
        param.data.narrow(0, dst_offset, rows).copy_(loaded_weight.narrow(0, src_rank * rows, rows))


class MergedColumnParallelLinear(ColumnParallelLinear):
    """Several column-parallel outputs fused into one matmul (e.g. gate_proj + up_proj), loaded by index."""

    def __init__(self, input_size: int, output_sizes: list[int], bias: bool = False, gather_output: bool = False,
                 tp_rank: int = 0, tp_size: int = 1, gemv_op: str = "") -> None:
        self.output_sizes = list(output_sizes)
        for size in self.output_sizes:
            divide(size, tp_size, "merged output size")
        super().__init__(input_size, sum(output_sizes), bias, gather_output, tp_rank, tp_size, gemv_op)

    def forward_normed_silu_mul(self, x: torch.Tensor, residual: Optional[torch.Tensor], norm: "RMSNorm"
                                ) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """`(silu(gate) * up, x + residual)` for `[gate | up] = forward(norm(x + residual))` in one kernel, where
        the small-batch kernels fold SiLU-and-mul into this projection (the CUDA GEMVs); None elsewhere, and
        the caller takes `forward_normed` and the down projection's `forward_silu_mul` instead."""
        kernel = gemv_kernel_for(x, self.weight, self.gemv_op)
        fused = getattr(kernel, "rmsnorm_gemv_silu_mul", None)  # the Triton GEMVs fold SiLU into down instead
        if (fused is None or self.gather_output or len(self.output_sizes) != 2
                or self.output_sizes[0] != self.output_sizes[1] or (residual is not None and residual.stride(-1) != 1)):
            return None
        return fused(x, residual, norm.weight, norm.variance_epsilon, self.weight, self.bias)

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
        if shard_id is None:  # a checkpoint that already holds the fused tensor
            for i, piece in enumerate(loaded_weight.split(self.output_sizes, dim=0)):
                self.weight_loader(param, piece, i)
            return
        if not isinstance(shard_id, int) or not 0 <= shard_id < len(self.output_sizes):
            raise ValueError(f"{type(self).__name__}: shard id {shard_id!r} not in 0..{len(self.output_sizes) - 1}")
        rows = self.output_sizes[shard_id] // self.tp_size
        offset = sum(self.output_sizes[:shard_id]) // self.tp_size
        self._load_piece(param, loaded_weight, f"{type(self).__name__} shard {shard_id}",
                         self.output_sizes[shard_id], offset, rows, self.tp_rank)


class QKVParallelLinear(ColumnParallelLinear):
    """q, k and v projections fused; heads split across ranks, KV heads replicated when tp_size > kv heads."""

    def __init__(self, hidden_size: int, head_size: int, total_num_heads: int,
                 total_num_kv_heads: Optional[int] = None, bias: bool = False,
                 tp_rank: int = 0, tp_size: int = 1, gemv_op: str = "") -> None:
        total_num_kv_heads = total_num_kv_heads or total_num_heads
        self.head_size, self.total_num_heads, self.total_num_kv_heads = head_size, total_num_heads, total_num_kv_heads
        self.num_heads = divide(total_num_heads, tp_size, "number of attention heads")
        if tp_size >= total_num_kv_heads:
            divide(tp_size, total_num_kv_heads, "tp_size over KV heads")  # each KV head on a whole number of ranks
            self.num_kv_heads, self.num_kv_head_replicas = 1, tp_size // total_num_kv_heads
        else:
            self.num_kv_heads = divide(total_num_kv_heads, tp_size, "number of KV heads")
            self.num_kv_head_replicas = 1
        output_size = (self.num_heads + 2 * self.num_kv_heads) * tp_size * head_size
        super().__init__(hidden_size, output_size, bias, False, tp_rank, tp_size, gemv_op)
        self.q_size, self.kv_size = self.num_heads * head_size, self.num_kv_heads * head_size

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
        if shard_id is None:  # fused checkpoint tensor: q then k then v, full sizes
            q, kv = self.total_num_heads * self.head_size, self.total_num_kv_heads * self.head_size
            for piece, sid in zip(loaded_weight.split([q, kv, kv], dim=0), "qkv"):
                self.weight_loader(param, piece, sid)
            return
        if shard_id == "q":
            full, offset, rows, src = self.total_num_heads * self.head_size, 0, self.q_size, self.tp_rank
        elif shard_id in ("k", "v"):
            full, rows = self.total_num_kv_heads * self.head_size, self.kv_size
            offset = self.q_size + (self.kv_size if shard_id == "v" else 0)
            src = self.tp_rank // self.num_kv_head_replicas
        else:
            raise ValueError(f"QKVParallelLinear: shard id must be 'q', 'k' or 'v', got {shard_id!r}")
        self._load_piece(param, loaded_weight, f"QKVParallelLinear shard {shard_id!r}", full, offset, rows, src)


class RowParallelLinear(LinearBase):
    """y = x W^T + b with W split by input columns; partial sums all-reduced, bias added once after."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False, input_is_parallel: bool = True,
                 reduce_results: bool = True, tp_rank: int = 0, tp_size: int = 1, gemv_op: str = "") -> None:
        self.input_size = input_size
        self.input_size_per_partition = divide(input_size, tp_size, "input size")
        super().__init__(self.input_size_per_partition, output_size, bias, tp_rank, tp_size, gemv_op)
        self.input_is_parallel, self.reduce_results = input_is_parallel, reduce_results

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel and self.tp_size > 1:
            x = x.narrow(-1, self.tp_rank * self.input_size_per_partition, self.input_size_per_partition)
        kernel = gemv_kernel_for(x, self.weight, self.gemv_op)
        if kernel is not None:
            fold = self._bias_in_kernel()
            return self._reduce(kernel.linear_gemv(x, self.weight, self.bias if fold else None),
                                None if fold else self.bias)
        return self._reduce(F.linear(x, self.weight), self.bias)

    def forward_silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """`forward(silu(gate) * up)` for `gate_up = [gate | up]` (this rank's halves, from a merged
        column-parallel projection). Small CUDA batches run it as one kernel, SiLU-and-mul the GEMV's prologue."""
        kernel = gemv_kernel_for(gate_up, self.weight, self.gemv_op)
        if kernel is None or (not self.input_is_parallel and self.tp_size > 1):
            return self.forward(silu_and_mul(gate_up))
        fold = self._bias_in_kernel()
        return self._reduce(kernel.silu_mul_gemv(gate_up, self.weight, self.bias if fold else None),
                            None if fold else self.bias)

    def _bias_in_kernel(self) -> bool:
        """Whether the GEMV kernel may add the bias itself: only when no all-reduce follows (it is added once)."""
        return self.bias is not None and not (self.reduce_results and self.tp_size > 1)

    def _reduce(self, out: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
        """All-reduce the partial sums (when this layer reduces), then add `bias`."""
        if self.reduce_results:
            out = tensor_model_parallel_all_reduce(out)
        return out + bias if bias is not None else out

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
        if shard_id is not None:
            raise ValueError(f"RowParallelLinear is not packed; got shard {shard_id!r}")
        if param.dim() == 1:  # bias: replicated
            check_shape("RowParallelLinear bias", tuple(param.shape), loaded_weight)
            param.data.copy_(loaded_weight)
            return
        check_shape("RowParallelLinear", (param.shape[0], self.input_size), loaded_weight)
        n = self.input_size_per_partition
        param.data.copy_(loaded_weight.narrow(1, self.tp_rank * n, n))


class ReplicatedLinear(LinearBase):
    """A plain linear layer held whole on every rank."""

    def __init__(self, input_size: int, output_size: int, bias: bool = False) -> None:
        super().__init__(input_size, output_size, bias, 0, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
        check_shape("ReplicatedLinear", tuple(param.shape), loaded_weight)
        param.data.copy_(loaded_weight)
