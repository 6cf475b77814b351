"""Expression nodes of the frontend language.

A program appends expressions to its state (`s += "text"`, `s += gen("x")`); the
interpreter executes them in order. Expressions compose with `+` into an
`SglExprList`, so `"A:" + gen("a")` is one expression.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Optional, Union

ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class SglSamplingParams:
    """Sampling knobs of one `gen`; None means "use the program's default"."""

    max_new_tokens: Optional[int] = None
    min_new_tokens: Optional[int] = None
    stop: Optional[Union[str, tuple[str, ...]]] = None
    stop_token_ids: Optional[tuple[int, ...]] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    frequency_penalty: Optional[float] = None
    presence_penalty: Optional[float] = None
    ignore_eos: Optional[bool] = None
    regex: Optional[str] = None
    json_schema: Optional[str] = None

    def merged_over(self, defaults: "SglSamplingParams") -> "SglSamplingParams":
        """These params with unset fields taken from `defaults`."""
        unset = {f.name: getattr(defaults, f.name) for f in fields(self) if getattr(self, f.name) is None}
        return replace(self, **unset)

    def to_srt_kwargs(self) -> dict[str, Any]:
        """The `sampling_params` dict of a native `/generate` request (unset fields omitted)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            if f.name == "stop":
                value = [value] if isinstance(value, str) else list(value)
                if not value:
                    continue
            elif f.name == "stop_token_ids":
                value = list(value)
            out[f.name] = value
        return out


DEFAULT_SAMPLING = SglSamplingParams(
    max_new_tokens=128, stop=(), temperature=1.0, top_p=1.0, top_k=-1, min_p=0.0,
    frequency_penalty=0.0, presence_penalty=0.0, ignore_eos=False,
)


class SglExpr:
    """Base of every expression; `+` concatenates into an `SglExprList`."""

    def __add__(self, other: "ExprLike") -> "SglExprList":
        return SglExprList([self, to_expr(other)])

    def __radd__(self, other: "ExprLike") -> "SglExprList":
        return SglExprList([to_expr(other), self])


ExprLike = Union[SglExpr, str]


def to_expr(value: ExprLike) -> SglExpr:
    if isinstance(value, SglExpr):
        return value
    if isinstance(value, str):
        return SglConstantText(value)
    raise TypeError(f"cannot append {type(value).__name__} to a program state; use str or an expression")


@dataclass(eq=False)
class SglConstantText(SglExpr):
    value: str


@dataclass(eq=False)
class SglExprList(SglExpr):
    exprs: list[SglExpr]

    def __post_init__(self) -> None:
        flat: list[SglExpr] = []
        for e in self.exprs:
            flat.extend(e.exprs if isinstance(e, SglExprList) else [e])
        self.exprs = flat


@dataclass(eq=False)
class SglGen(SglExpr):
    """Generate text into variable `name` (None: append without naming it)."""

    name: Optional[str]
    sampling_params: SglSamplingParams = field(default_factory=SglSamplingParams)
    return_logprob: bool = False
    logprob_start_len: Optional[int] = None
    top_logprobs_num: Optional[int] = None
    return_text_in_logprobs: bool = False


@dataclass(eq=False)
class SglSelect(SglExpr):
    """Choose one of `choices` by prompt logprobs, under `choices_method`."""

    name: Optional[str]
    choices: list[str]
    temperature: float = 0.0
    choices_method: Optional[Callable] = None


@dataclass(eq=False)
class SglRoleBegin(SglExpr):
    role: str


@dataclass(eq=False)
class SglRoleEnd(SglExpr):
    role: str


def role_expr(role: str, expr: Optional[ExprLike]) -> SglExprList:
    inner = [] if expr is None else [to_expr(expr)]
    return SglExprList([SglRoleBegin(role), *inner, SglRoleEnd(role)])


def json_schema_str(schema: Union[None, str, dict]) -> Optional[str]:
    """`gen(json_schema=...)` accepts a dict or a JSON string; the server takes a string."""
    if schema is None or isinstance(schema, str):
        return schema
    return json.dumps(schema)


def is_generation(expr: SglExpr) -> bool:
    """True for expressions that need the model (the end of a constant prefix)."""
    if isinstance(expr, SglExprList):
        return any(is_generation(e) for e in expr.exprs)
    return isinstance(expr, (SglGen, SglSelect))
