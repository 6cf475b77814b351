"""Regex (IPv4, date) and EBNF (arithmetic) outputs match in full."""

from __future__ import annotations

import re
from typing import Callable

import pytest
import torch
from grammar_driver import STOP_TOKEN_IDS, VOCAB_SIZE, closing_token_ids, decode, drive, ready
from transformers import PreTrainedTokenizerBase

from radixlm.constrained import GrammarBackend

OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
IPV4 = rf"{OCTET}(\.{OCTET}){{3}}"
DATE = r"[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
ARITHMETIC = r"""
root ::= expr
expr ::= term (("+" | "-") term)*
term ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")"
number ::= [0-9]+
"""


@pytest.fixture(scope="module")
def closers(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    return closing_token_ids(tokenizer, STOP_TOKEN_IDS)


def generate(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase, closers: torch.Tensor,
             kind: str, text: str, n: int = 8, close_p: float = 0.7) -> list[str]:
    outputs = drive([ready(backend, (kind, text)) for _ in range(n)], VOCAB_SIZE, closers, seed=3, close_p=close_p)
    return [decode(tokenizer, tokens, STOP_TOKEN_IDS) for tokens in outputs]


@pytest.mark.parametrize("pattern", [IPV4, DATE], ids=["ipv4", "date"])
def test_regex_outputs_match_in_full(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase,
                                     closers: torch.Tensor, pattern: str) -> None:
    texts = generate(backend, tokenizer, closers, "regex", pattern)
    assert len(set(texts)) > 1, "the random walk should explore"
    for text in texts:
        assert re.fullmatch(pattern, text), text


def parse_arithmetic(text: str) -> None:
    """A recursive-descent parser of ARITHMETIC; raises ValueError unless `text` is a whole expr."""
    pos = 0

    def expect_factor() -> None:
        nonlocal pos
        if text[pos:pos + 1] == "(":
            pos += 1
            expect_expr()
            if text[pos:pos + 1] != ")":
                raise ValueError(f"expected ')' at {pos} in {text!r}")
            pos += 1
            return
        digits = re.match(r"[0-9]+", text[pos:])
        if not digits:
            raise ValueError(f"expected a number at {pos} in {text!r}")
        pos += digits.end()

    def expect_chain(operand: Callable[[], None], ops: str) -> None:
        nonlocal pos
        operand()
        while text[pos:pos + 1] and text[pos] in ops:
            pos += 1
            operand()

    def expect_expr() -> None:
        expect_chain(lambda: expect_chain(expect_factor, "*/"), "+-")

    expect_expr()
    if pos != len(text):
        raise ValueError(f"trailing text at {pos} in {text!r}")


def test_ebnf_arithmetic(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase, closers: torch.Tensor) -> None:
    texts = generate(backend, tokenizer, closers, "ebnf", ARITHMETIC, close_p=0.5)
    assert any(set(t) & set("+-*/") for t in texts), texts
    for text in texts:
        parse_arithmetic(text)
    with pytest.raises(ValueError):
        parse_arithmetic("1+")
