"""`--grammar-backend none`: structured output is off; every constrained request fails with a 400."""

from __future__ import annotations

from typing import Any, NoReturn

from radixlm.constrained.base import GrammarBackend, GrammarError, GrammarKey, GrammarObject, param_of, register_grammar_backend

DISABLED = "structured output is disabled (--grammar-backend none)"


@register_grammar_backend("none")
class NoGrammarBackend(GrammarBackend):
    def __init__(self, tokenizer: Any = None, vocab_size: int = 0, **_: Any) -> None:
        super().__init__(num_threads=1)

    def compile(self, key: GrammarKey) -> NoReturn:
        raise GrammarError(param_of(key), DISABLED)

    def new_object(self, compiled: Any) -> GrammarObject:
        raise AssertionError("the none backend never compiles a grammar")

    @classmethod
    def validate(cls, kind: str, text: str) -> NoReturn:
        raise ValueError(DISABLED)
