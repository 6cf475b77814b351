"""Tensor-parallel shard math: per-rank layers loaded from full weights reproduce the full layer."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from radixlm.layers.linear import (ColumnParallelLinear, MergedColumnParallelLinear, QKVParallelLinear,
                                   RowParallelLinear)
from radixlm.layers.vocab_parallel_embedding import VocabParallelEmbedding


def load(param: torch.nn.Parameter, w: torch.Tensor, shard: object = None) -> None:
    param.weight_loader(param, w, shard)


@pytest.mark.parametrize("tp_size", [1, 2, 4])
def test_column_parallel_shards_concatenate_to_full(tp_size: int) -> None:
    w, b, x = torch.randn(16, 8), torch.randn(16), torch.randn(3, 8)
    outs = []
    for rank in range(tp_size):
        layer = ColumnParallelLinear(8, 16, bias=True, tp_rank=rank, tp_size=tp_size)
        load(layer.weight, w)
        load(layer.bias, b)
        outs.append(layer(x))
    torch.testing.assert_close(torch.cat(outs, -1), F.linear(x, w, b))


@pytest.mark.parametrize("tp_size", [1, 2])
def test_merged_column_parallel_gate_up(tp_size: int) -> None:
    gate, up, x = torch.randn(12, 8), torch.randn(12, 8), torch.randn(3, 8)
    for rank in range(tp_size):
        layer = MergedColumnParallelLinear(8, [12, 12], tp_rank=rank, tp_size=tp_size)
        load(layer.weight, gate, 0)
        load(layer.weight, up, 1)
        n = 12 // tp_size
        expected = torch.cat([gate[rank * n:(rank + 1) * n], up[rank * n:(rank + 1) * n]])
        assert torch.equal(layer.weight.data, expected)


@pytest.mark.parametrize("tp_size,kv_heads", [(1, 2), (2, 2), (4, 2), (8, 2), (2, 4)])
def test_qkv_heads_split_and_kv_replicated(tp_size: int, kv_heads: int) -> None:
    heads, d, hidden = 8, 4, 16
    wq, wk, wv = torch.randn(heads * d, hidden), torch.randn(kv_heads * d, hidden), torch.randn(kv_heads * d, hidden)
    q_parts, k_parts = [], []
    for rank in range(tp_size):
        layer = QKVParallelLinear(hidden, d, heads, kv_heads, bias=False, tp_rank=rank, tp_size=tp_size)
        for w, sid in ((wq, "q"), (wk, "k"), (wv, "v")):
            load(layer.weight, w, sid)
        q, k, v = layer.weight.data.split([layer.q_size, layer.kv_size, layer.kv_size])
        q_parts.append(q)
        k_parts.append(k)
        kv_rank = rank // layer.num_kv_head_replicas
        assert torch.equal(v, wv[kv_rank * layer.kv_size:(kv_rank + 1) * layer.kv_size])
    assert torch.equal(torch.cat(q_parts), wq)
    replicas = max(1, tp_size // kv_heads)
    assert torch.equal(torch.cat(k_parts[::replicas]), wk)


@pytest.mark.parametrize("tp_size", [1, 2, 4])
def test_row_parallel_partial_sums_add_to_full(tp_size: int) -> None:
    w, b, x = torch.randn(6, 16), torch.randn(6), torch.randn(3, 16)
    total = torch.zeros(3, 6)
    for rank in range(tp_size):
        layer = RowParallelLinear(16, 6, bias=False, tp_rank=rank, tp_size=tp_size)
        load(layer.weight, w)
        n = 16 // tp_size
        total += layer(x[:, rank * n:(rank + 1) * n])
    torch.testing.assert_close(total + b, F.linear(x, w, b))


def test_vocab_parallel_embedding_ranges_cover_vocab() -> None:
    vocab, dim, tp_size = 10, 4, 3  # padded to 12
    w, ids = torch.randn(vocab, dim), torch.tensor([0, 3, 4, 9])
    total = torch.zeros(4, dim)
    for rank in range(tp_size):
        emb = VocabParallelEmbedding(vocab, dim, rank, tp_size)
        load(emb.weight, w)
        in_range = (ids >= emb.vocab_start_index) & (ids < emb.vocab_end_index)
        local = torch.where(in_range, ids - emb.vocab_start_index, 0)
        total += F.embedding(local, emb.weight) * in_range[:, None]
    assert torch.equal(total, w[ids])


def test_shape_mismatch_raises_value_error_with_shapes() -> None:
    layer = QKVParallelLinear(16, 4, 4, 2)
    with pytest.raises(ValueError, match=r"shard 'k'.*\(8, 16\).*\(12, 16\)"):
        load(layer.weight, torch.randn(12, 16), "k")
    with pytest.raises(ValueError, match="not divisible"):
        ColumnParallelLinear(8, 10, tp_size=4)
