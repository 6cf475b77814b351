"""radixlm_kernel.argmax against torch.argmax (`reference.argmax_ref`): the same index on every row,
ties, NaN, all -inf rows and rows spread over several chunks included."""

from __future__ import annotations

import pytest
import torch

from radixlm_kernel import argmax
from radixlm_kernel.argmax import _CHUNK
from radixlm_kernel.reference import argmax_ref


@pytest.mark.parametrize("vocab", [1, 50, _CHUNK, _CHUNK + 1, 3 * _CHUNK + 17])
def test_argmax_matches_torch(device: str, dtype: torch.dtype, vocab: int) -> None:
    torch.manual_seed(vocab)
    logits = torch.randn(6, vocab, device=device).to(dtype)
    out = argmax(logits)
    assert out.dtype == torch.int64 and out.tolist() == argmax_ref(logits).tolist()


def test_argmax_ties_nan_and_inf(device: str) -> None:
    vocab = 2 * _CHUNK + 100
    logits = torch.randn(6, vocab, device=device)
    logits[0, [_CHUNK + 5, 7, 2 * _CHUNK + 3]] = 9.0  # a tie across chunks: the first index wins
    logits[1].fill_(-float("inf"))  # all -inf: index 0
    logits[2, [_CHUNK + 1, 2 * _CHUNK + 50]] = float("nan")  # NaN outranks every number
    logits[2, 3] = float("inf")
    logits[3, 2 * _CHUNK + 99] = float("inf")
    logits[4, 10] = 5.0
    logits[4, 11] = 5.0  # a tie inside one chunk
    logits[5, _CHUNK - 1] = 1e30
    assert argmax(logits).tolist() == argmax_ref(logits).tolist() == [7, 0, _CHUNK + 1, 2 * _CHUNK + 99, 10,
                                                                       _CHUNK - 1]


def test_argmax_strided_rows_and_errors(device: str) -> None:
    wide = torch.randn(4, 5000, device=device)
    view = wide[:, :4500]  # rows padded beyond the vocabulary, as a sliced logits buffer
    assert argmax(view).tolist() == argmax_ref(view).tolist()
    assert argmax(wide[:0]).shape == (0,)
    with pytest.raises(ValueError, match="logits must be"):
        argmax(wide.t())
    with pytest.raises(ValueError, match="logits must be"):
        argmax(wide[0])
    with pytest.raises(ValueError, match="at least one column"):
        argmax(wide[:, :0])
