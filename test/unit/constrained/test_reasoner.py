"""ReasonerGrammar over a real xgrammar matcher (SmolLM2's tokenizer): everything is allowed until the output's
tokens end with the thinking block's end tag, then the inner grammar rules; rollback, copy and batched fills."""

from __future__ import annotations

import pytest
import torch
from grammar_driver import VOCAB_SIZE, ready
from transformers import PreTrainedTokenizerBase

from radixlm.constrained import GrammarBackend, allocate_vocab_mask, bitmask_to_bool_mask, fill_batch_mask
from radixlm.constrained.reasoner import ReasonerGrammar

DIGITS = ("regex", "[0-9]{1,3}")


def allowed_rows(grammars: list, vocab_size: int = VOCAB_SIZE) -> torch.Tensor:
    bitmask = allocate_vocab_mask(vocab_size, len(grammars))
    fill_batch_mask(grammars, bitmask)
    return bitmask_to_bool_mask(bitmask, vocab_size)


@pytest.fixture()
def parts(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase) -> tuple:
    end_ids = tokenizer.encode("</think>", add_special_tokens=False)
    assert len(end_ids) > 1  # SmolLM2 has no such token: the run of ids is matched
    return ReasonerGrammar(ready(backend, DIGITS), end_ids), end_ids, tokenizer


def test_free_while_thinking_then_constrained(parts: tuple) -> None:
    grammar, end_ids, tokenizer = parts
    letter = tokenizer.encode("Hmm", add_special_tokens=False)[0]
    digit = tokenizer.encode("7", add_special_tokens=False)[0]
    assert allowed_rows([grammar])[0].all()
    for token in tokenizer.encode("Hmm, let me see.", add_special_tokens=False) + end_ids[:-1]:
        grammar.accept_token(token)  # a letter: the digits-only grammar would refuse it
    assert grammar.in_reasoning and allowed_rows([grammar])[0].all()
    grammar.accept_token(end_ids[-1])
    mask = allowed_rows([grammar])[0]
    assert not grammar.in_reasoning and mask[digit] and not mask[letter]
    with pytest.raises(ValueError):
        grammar.accept_token(letter)
    grammar.accept_token(digit)
    assert not grammar.is_terminated()


def test_rollback_and_copy(parts: tuple) -> None:
    grammar, end_ids, tokenizer = parts
    digit = tokenizer.encode("7", add_special_tokens=False)[0]
    for token in end_ids + [digit]:
        grammar.accept_token(token)
    twin = grammar.copy()
    grammar.rollback(2)  # the digit and the tag's last token: thinking again
    assert grammar.in_reasoning and allowed_rows([grammar])[0].all()
    assert not twin.in_reasoning and not allowed_rows([twin])[0].all()  # the copy kept its state
    grammar.accept_token(end_ids[-1])
    assert not grammar.in_reasoning and (grammar.answering, twin.answering) == (0, 1)
    with pytest.raises(ValueError, match="roll back"):
        grammar.rollback(len(end_ids) + 1)


def test_batched_fill_mixes_thinking_answering_and_plain_rows(parts: tuple, backend: GrammarBackend) -> None:
    thinking, end_ids, _ = parts
    answering = ReasonerGrammar(ready(backend, DIGITS), end_ids)
    for token in end_ids:
        answering.accept_token(token)
    plain = ready(backend, DIGITS)
    rows = allowed_rows([thinking, answering, None, plain])
    assert rows[0].all() and rows[2].all()
    assert rows[1].equal(rows[3]) and not rows[1].all()
