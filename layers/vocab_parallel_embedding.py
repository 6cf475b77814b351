"""Vocabulary-parallel embedding and LM head.

The vocabulary is split into `tp_size` contiguous ranges (padded up to a multiple of
`tp_size`); a rank embeds only the ids in its range, zeroes the rest, and the partial
embeddings are all-reduced. The LM head holds the same slice of rows; the logits
processor all-gathers the vocab slices and trims the padding. A tied LM head is simply
the embedding module itself.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from radixlm.distributed import tensor_model_parallel_all_reduce
from radixlm.layers.parameter import check_shape


class VocabParallelEmbedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int, tp_rank: int = 0, tp_size: int = 1) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.tp_rank, self.tp_size = tp_rank, tp_size
        self.num_embeddings_per_partition = -(-num_embeddings // tp_size)
        self.num_embeddings_padded = self.num_embeddings_per_partition * tp_size
        self.vocab_start_index = tp_rank * self.num_embeddings_per_partition
        self.vocab_end_index = self.vocab_start_index + self.num_embeddings_per_partition
        self.weight = nn.Parameter(torch.empty(self.num_embeddings_per_partition, embedding_dim))
        self.weight.weight_loader = self.weight_loader

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if self.tp_size == 1:
            return F.embedding(input_ids, self.weight)
        in_range = (input_ids >= self.vocab_start_index) & (input_ids < self.vocab_end_index)
        local_ids = torch.where(in_range, input_ids - self.vocab_start_index, 0)
        out = F.embedding(local_ids, self.weight) * in_range.unsqueeze(-1).to(self.weight.dtype)
        return tensor_model_parallel_all_reduce(out)

    def weight_loader(self, param: nn.Parameter, loaded_weight: torch.Tensor, shard_id: object = None) -> None:
        if shard_id is not None:
            raise ValueError(f"{type(self).__name__} is not packed; got shard {shard_id!r}")
        check_shape(type(self).__name__, (self.num_embeddings, self.embedding_dim), loaded_weight)
        end = min(self.vocab_end_index, self.num_embeddings)
        rows = max(0, end - self.vocab_start_index)
        param.data[rows:].zero_()  # padding rows past the real vocabulary
        param.data[:rows].copy_(loaded_weight[self.vocab_start_index:end])


class ParallelLMHead(VocabParallelEmbedding):
    """The output projection: this rank's vocab rows; the LogitsProcessor applies it."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("ParallelLMHead is applied by LogitsProcessor, not called directly")
