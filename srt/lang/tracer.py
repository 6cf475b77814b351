"""Finding a program's constant prefix: the text it appends before it first needs the model.

`run_batch` traces every item (running its Python up to the first gen/select, fork or
variable read, without a backend) and prefills the items' longest common prefix once,
so the batch computes e.g. a few-shot preamble once instead of once per item.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from radixlm.lang.chat_template import ChatTemplate
from radixlm.lang.interpreter import StreamExecutor
from radixlm.lang.ir import DEFAULT_SAMPLING, SglExpr, SglExprList, SglGen, SglSelect
from radixlm.lang.state import ProgramState


class StopTracing(BaseException):
    """Raised inside a traced program at its first model-dependent step (a BaseException so
    that a program's own `except Exception` does not swallow it)."""


class PrefixTracer(StreamExecutor):
    """An executor that renders constant text and roles in place and stops at anything else."""

    def __init__(self, chat_template: ChatTemplate) -> None:
        super().__init__(backend=None, default_sampling=DEFAULT_SAMPLING)
        self.chat_template = chat_template

    def submit(self, expr: SglExpr) -> None:
        for e in expr.exprs if isinstance(expr, SglExprList) else [expr]:
            if isinstance(e, (SglGen, SglSelect)):
                raise StopTracing
            self.execute(e)

    def sync(self) -> None:
        pass

    def get_var(self, name: str) -> Any:
        raise StopTracing

    def fork(self, n: int) -> list[StreamExecutor]:
        raise StopTracing


def trace_constant_prefix(func: Callable, chat_template: ChatTemplate, kwargs: dict[str, Any]) -> str:
    """The text `func(s, **kwargs)` appends before its first model call."""
    tracer = PrefixTracer(chat_template)
    try:
        func(ProgramState(tracer), **kwargs)
    except (StopTracing, Exception):  # the program's own error: the prefix so far still counts
        pass
    return tracer.text_


def common_prefix(texts: list[str]) -> str:
    """The texts' longest common prefix, cut back to a word boundary when they diverge.

    A cut inside a word (or inside a whitespace run) would tokenize differently from the
    same characters inside each item, and the cache could not match its last token.
    """
    prefix = os.path.commonprefix(texts) if texts else ""
    if all(len(t) == len(prefix) for t in texts):
        return prefix
    cut = len(prefix)
    while cut > 0 and not (not prefix[cut - 1].isspace() and all(len(t) == cut or t[cut].isspace() for t in texts)):
        cut -= 1
    return prefix[:cut]
