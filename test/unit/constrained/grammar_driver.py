"""A stand-in "model" for grammar tests: random logits, masked exactly as the sampler would.

Each step fills the batch bitmask, applies it to seeded random logits and takes the argmax
(greedy). Random walks through strings, arrays and digits would rarely end, so with
probability `close_p` a row's "closing" tokens (those containing `"`, `}`, `]`, `)`, or a
stop token) get a bonus: the walk still explores, but finishes in a few dozen tokens.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
from transformers import PreTrainedTokenizerBase

from radixlm.constrained import (
    GrammarBackend, GrammarKey, GrammarObject, allocate_vocab_mask, apply_vocab_mask, fill_batch_mask,
)

VOCAB_SIZE = 49152  # SmolLM2's model vocab (== its tokenizer's)
STOP_TOKEN_IDS = [2]  # <|im_end|>
CLOSERS = ('"', "}", "]", ")")


def closing_token_ids(tokenizer: PreTrainedTokenizerBase, stop_token_ids: Sequence[int]) -> torch.Tensor:
    ids = [tid for tok, tid in tokenizer.get_vocab().items()
           if any(c in tokenizer.convert_tokens_to_string([tok]) for c in CLOSERS)]
    return torch.tensor(sorted(set(ids) | set(stop_token_ids)))


def drive(
    grammars: Sequence[GrammarObject], vocab_size: int, closers: torch.Tensor, seed: int,
    max_steps: int = 400, close_p: float = 0.7,
) -> list[list[int]]:
    """Sample until every grammar terminates; returns each row's tokens (stop token included)."""
    gen = torch.Generator().manual_seed(seed)
    bitmask = allocate_vocab_mask(vocab_size, len(grammars))
    outputs: list[list[int]] = [[] for _ in grammars]
    for _ in range(max_steps):
        live: list[Optional[GrammarObject]] = [None if g.is_terminated() else g for g in grammars]
        if all(g is None for g in live):
            return outputs
        rows = fill_batch_mask(live, bitmask)
        logits = torch.randn(len(grammars), vocab_size, generator=gen)
        bonus = (torch.rand(len(grammars), 1, generator=gen) < close_p).float() * 50.0
        logits[:, closers] += bonus
        apply_vocab_mask(logits, bitmask, indices=rows)
        for row, token in zip(rows, logits.argmax(dim=-1)[rows].tolist()):
            live[row].accept_token(token)
            outputs[row].append(token)
    raise AssertionError(f"grammars did not terminate within {max_steps} steps")


def decode(tokenizer: PreTrainedTokenizerBase, tokens: list[int], stop_token_ids: Sequence[int]) -> str:
    assert tokens and tokens[-1] in stop_token_ids, "a terminated grammar ends with a stop token"
    return tokenizer.decode(tokens[:-1])


def ready(backend: GrammarBackend, key: GrammarKey) -> GrammarObject:
    """Wait for `key` to compile (raising GrammarError if invalid) and return a fresh matcher."""
    backend.get_compiled(key, timeout=60)
    grammar = backend.poll_ready(key)
    assert isinstance(grammar, GrammarObject), grammar
    return grammar
