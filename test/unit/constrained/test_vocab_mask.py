"""The batched mask: xgrammar's apply kernel against the pure-torch reference, and the sampler's forms."""

from __future__ import annotations

import pytest
import torch
from grammar_driver import STOP_TOKEN_IDS, VOCAB_SIZE, ready
from transformers import PreTrainedTokenizerBase

from radixlm.constrained import (
    ANY_JSON, GrammarBackend, allocate_vocab_mask, create_grammar_backend, apply_vocab_mask, bitmask_to_bool_mask, build_batch_vocab_mask,
    fill_batch_mask,
)
from radixlm.constrained.vocab_mask import apply_vocab_mask_reference
from radixlm.sampling.sampler import Sampler
from radixlm.sampling.sampling_batch_info import SamplingBatchInfo


def random_bitmask(bs: int, vocab: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    bitmask = torch.randint(-(2**31), 2**31 - 1, (bs, (vocab + 31) // 32), dtype=torch.int32, generator=gen)
    allowed = bitmask_to_bool_mask(bitmask, bitmask.shape[1] * 32)
    allowed[:, vocab:] = False  # like a matcher's: ids past the vocab are never allowed
    bitmask = pack(allowed)
    bitmask[0] = -1  # an unconstrained row
    return bitmask


def pack(allowed: torch.Tensor) -> torch.Tensor:
    """bool [bs, 32 * w] -> int32 [bs, w] (the inverse of bitmask_to_bool_mask)."""
    words = (allowed.view(allowed.shape[0], -1, 32).long() << torch.arange(32)).sum(dim=-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)  # as signed int32


@pytest.mark.parametrize("vocab, logits_width", [(100, 100), (1000, 1000), (VOCAB_SIZE, VOCAB_SIZE), (1000, 1030)])
def test_apply_matches_reference(vocab: int, logits_width: int) -> None:
    bitmask = random_bitmask(6, vocab, seed=vocab)
    logits = torch.randn(6, logits_width)
    expected = logits.clone()
    apply_vocab_mask_reference(expected, bitmask)
    apply_vocab_mask(logits, bitmask)
    assert torch.equal(logits, expected)
    assert torch.isneginf(logits[1:, vocab:]).all()  # padded ids past the mask: never allowed


def test_apply_with_indices_touches_only_those_rows() -> None:
    bitmask = random_bitmask(4, 500, seed=1)
    logits = torch.randn(4, 500)
    original = logits.clone()
    apply_vocab_mask(logits, bitmask, indices=[2])
    assert torch.equal(logits[[0, 1, 3]], original[[0, 1, 3]])
    expected = original[2:3].clone()
    apply_vocab_mask_reference(expected, bitmask[2:3])
    assert torch.equal(logits[2:3], expected)


def test_bool_mask_unpacks_bits() -> None:
    bitmask = torch.zeros(2, 2, dtype=torch.int32)
    bitmask[0, 0] = 0b101  # tokens 0 and 2
    bitmask[1, 1] = -(2**31)  # bit 31 of word 1: token 63
    mask = bitmask_to_bool_mask(bitmask, 64)
    assert mask[0].nonzero().flatten().tolist() == [0, 2]
    assert mask[1].nonzero().flatten().tolist() == [63]


def test_fill_batch_mask_mixed_rows(backend: GrammarBackend) -> None:
    grammars = [None, ready(backend, ("regex", "[0-9]+")), None, ready(backend, ("regex", "yes|no"))]
    bitmask = torch.zeros(4, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)  # stale contents get overwritten
    assert fill_batch_mask(grammars, bitmask) == [1, 3]
    assert (bitmask[[0, 2]] == -1).all()
    for row in (1, 3):
        single = allocate_vocab_mask(VOCAB_SIZE, 1)
        grammars[row].fill_vocab_mask(single, 0)
        assert torch.equal(bitmask[row], single[0])
    assert build_batch_vocab_mask([None, None], VOCAB_SIZE) is None


def test_unconstrained_rows_are_bit_identical_and_sampler_forms_agree(backend: GrammarBackend) -> None:
    grammars = [None, ready(backend, ("regex", "[0-9]+")), None]
    bitmask = build_batch_vocab_mask(grammars, VOCAB_SIZE)
    logits = torch.randn(3, VOCAB_SIZE)
    masked = logits.clone()
    apply_vocab_mask(masked, bitmask)
    assert torch.equal(masked[[0, 2]], logits[[0, 2]])
    # The SamplingBatchInfo.vocab_mask (bool) form gives the same greedy tokens.
    info = SamplingBatchInfo(
        temperatures=torch.zeros(3, 1), top_ps=torch.ones(3), top_ks=torch.full((3,), VOCAB_SIZE),
        min_ps=torch.zeros(3), seeds=torch.zeros(3, dtype=torch.int64), steps=torch.zeros(3, dtype=torch.int64),
        is_all_greedy=True, vocab_mask=bitmask_to_bool_mask(bitmask, VOCAB_SIZE))
    assert torch.equal(Sampler()(logits.clone(), info), masked.argmax(dim=-1))
    assert masked[1].argmax().item() not in STOP_TOKEN_IDS  # "[0-9]+" needs a digit first


def test_threaded_batch_fill_matches_per_row(tokenizer: PreTrainedTokenizerBase) -> None:
    backend = create_grammar_backend("xgrammar", tokenizer, VOCAB_SIZE, stop_token_ids=STOP_TOKEN_IDS, mask_fill_threads=2)
    try:
        grammars = [ready(backend, ("regex", "[0-9]+")), None, ready(backend, ("json", ANY_JSON)),
                    ready(backend, ("regex", "yes|no"))]
        bitmask = allocate_vocab_mask(VOCAB_SIZE, 4)
        assert fill_batch_mask(grammars, bitmask) == [0, 2, 3]
        for row in (0, 2, 3):
            single = allocate_vocab_mask(VOCAB_SIZE, 1)
            grammars[row].fill_vocab_mask(single, 0)
            assert torch.equal(bitmask[row], single[0])
    finally:
        backend.shutdown()
