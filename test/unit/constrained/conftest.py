"""Constrained-decoding fixtures: the real SmolLM2 tokenizer and one xgrammar backend per session."""

from __future__ import annotations

from typing import Iterator

import pytest
from transformers import PreTrainedTokenizerBase

from grammar_driver import STOP_TOKEN_IDS, VOCAB_SIZE
from radixlm.constrained import GrammarBackend, create_grammar_backend


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir: str) -> PreTrainedTokenizerBase:
    from radixlm.model_loader.tokenizer import get_tokenizer

    return get_tokenizer(smollm2_dir)


@pytest.fixture(scope="session")
def backend(tokenizer: PreTrainedTokenizerBase) -> Iterator[GrammarBackend]:
    b = create_grammar_backend("xgrammar", tokenizer, VOCAB_SIZE, stop_token_ids=STOP_TOKEN_IDS, num_threads=2)
    yield b
    b.shutdown()
