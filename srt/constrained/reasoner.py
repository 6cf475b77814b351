"""A grammar that waits for the reasoning to end: think freely, then answer under the constraint.

With `--reasoning-parser`, a constrained request whose output starts inside the thinking block
(`require_reasoning`) gets its matcher wrapped: every token is allowed until the output's tokens end with the
block's end tag, and the grammar applies from the next token on. Tokens are matched on ids, as the model
writes the tag (one added token in Qwen3 and DeepSeek-R1; a fixed run of tokens otherwise).
"""

from __future__ import annotations

from typing import Sequence

import torch

from radixlm.constrained.base import GrammarObject
from radixlm.constrained.vocab_mask import FULL_WORD


class ReasonerGrammar(GrammarObject):
    def __init__(self, inner: GrammarObject, think_end_ids: Sequence[int]) -> None:
        if not think_end_ids:
            raise ValueError("think_end_ids must not be empty")
        self.inner = inner
        self.think_end_ids = tuple(think_end_ids)
        self.thinking: list[int] = []  # the tokens accepted while thinking, the end tag's included
        self.answering = 0  # the tokens the inner grammar accepted since
        self.in_reasoning = True

    def accept_token(self, token_id: int) -> None:
        if not self.in_reasoning:
            self.inner.accept_token(token_id)
            self.answering += 1
            return
        self.thinking.append(int(token_id))
        end = len(self.think_end_ids)
        self.in_reasoning = tuple(self.thinking[-end:]) != self.think_end_ids

    def fill_vocab_mask(self, bitmask: torch.Tensor, row: int) -> None:
        if self.in_reasoning:
            bitmask[row].fill_(FULL_WORD)
        else:
            self.inner.fill_vocab_mask(bitmask, row)

    def is_terminated(self) -> bool:
        return not self.in_reasoning and self.inner.is_terminated()

    def rollback(self, num_tokens: int) -> None:
        undo_inner = min(num_tokens, self.answering)
        self.inner.rollback(undo_inner)
        self.answering -= undo_inner
        undo_thinking = num_tokens - undo_inner
        if undo_thinking > len(self.thinking):
            raise ValueError(f"cannot roll back {num_tokens} tokens: only {len(self.thinking) + undo_inner} accepted")
        if undo_thinking:
            del self.thinking[len(self.thinking) - undo_thinking:]
            self.in_reasoning = True

    def copy(self) -> "ReasonerGrammar":
        twin = ReasonerGrammar(self.inner.copy(), self.think_end_ids)
        twin.thinking, twin.answering, twin.in_reasoning = list(self.thinking), self.answering, self.in_reasoning
        return twin

    @classmethod
    def fill_vocab_mask_batch(cls, objs: Sequence["ReasonerGrammar"], bitmask: torch.Tensor,
                              rows: Sequence[int]) -> None:
        """Thinking rows allow everything; the others go to their inner grammars' own batched fill."""
        groups: dict[type, tuple[list[GrammarObject], list[int]]] = {}
        for obj, row in zip(objs, rows):
            if obj.in_reasoning:
                bitmask[row].fill_(FULL_WORD)
                continue
            inner, inner_rows = groups.setdefault(type(obj.inner), ([], []))
            inner.append(obj.inner)
            inner_rows.append(row)
        for inner_cls, (inner, inner_rows) in groups.items():
            inner_cls.fill_vocab_mask_batch(inner, bitmask, inner_rows)
