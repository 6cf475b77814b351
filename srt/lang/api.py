"""The public primitives: `function`, `gen`, `select`, roles, and the default backend."""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

from radixlm.lang.choices import ChoicesSamplingMethod, token_length_normalized
from radixlm.lang.ir import (
    ExprLike, SglExprList, SglGen, SglRoleBegin, SglRoleEnd, SglSamplingParams, SglSelect,
    json_schema_str, role_expr,
)
from radixlm.lang.program import SglFunction, get_default_backend, set_default_backend

__all__ = [
    "function", "gen", "select", "system", "user", "assistant", "system_begin", "system_end",
    "user_begin", "user_end", "assistant_begin", "assistant_end", "set_default_backend",
    "get_default_backend", "flush_cache",
]


def function(func: Optional[Callable] = None) -> Union[SglFunction, Callable[[Callable], SglFunction]]:
    """Decorator: `@function` or `@function()` turns `def prog(s, ...)` into a program."""
    if func is None:
        return SglFunction
    return SglFunction(func)


def gen(name: Optional[str] = None, max_tokens: Optional[int] = None, min_tokens: Optional[int] = None,
        stop: Union[None, str, list[str]] = None, stop_token_ids: Optional[list[int]] = None,
        temperature: Optional[float] = None, top_p: Optional[float] = None, top_k: Optional[int] = None,
        min_p: Optional[float] = None, frequency_penalty: Optional[float] = None,
        presence_penalty: Optional[float] = None, ignore_eos: Optional[bool] = None,
        return_logprob: bool = False, logprob_start_len: Optional[int] = None,
        top_logprobs_num: Optional[int] = None, return_text_in_logprobs: bool = False,
        choices: Optional[list[str]] = None, choices_method: Optional[ChoicesSamplingMethod] = None,
        regex: Optional[str] = None, json_schema: Union[None, str, dict] = None) -> Union[SglGen, SglSelect]:
    """Generate into variable `name`; with `choices`, this is `select`."""
    if choices is not None:
        return select(name, choices, temperature or 0.0, choices_method or token_length_normalized)
    if regex is not None and json_schema is not None:
        raise ValueError("gen: pass at most one of regex and json_schema")
    params = SglSamplingParams(
        max_new_tokens=max_tokens, min_new_tokens=min_tokens,
        stop=None if stop is None else (stop if isinstance(stop, str) else tuple(stop)),
        stop_token_ids=None if stop_token_ids is None else tuple(stop_token_ids),
        temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
        frequency_penalty=frequency_penalty, presence_penalty=presence_penalty, ignore_eos=ignore_eos,
        regex=regex, json_schema=json_schema_str(json_schema),
    )
    return SglGen(name, params, return_logprob, logprob_start_len, top_logprobs_num, return_text_in_logprobs)


def select(name: Optional[str] = None, choices: Optional[list[str]] = None, temperature: float = 0.0,
           choices_method: ChoicesSamplingMethod = token_length_normalized) -> SglSelect:
    """Append the best of `choices` (scored from prompt logprobs) and store it in `name`."""
    if not choices:
        raise ValueError("select needs a non-empty list of choices")
    if not all(isinstance(c, str) for c in choices):
        raise TypeError("select choices must be strings")
    return SglSelect(name, list(choices), temperature, choices_method)


def system(expr: Optional[ExprLike] = None) -> SglExprList:
    return role_expr("system", expr)


def user(expr: Optional[ExprLike] = None) -> SglExprList:
    return role_expr("user", expr)


def assistant(expr: Optional[ExprLike] = None) -> SglExprList:
    return role_expr("assistant", expr)


def system_begin() -> SglRoleBegin:
    return SglRoleBegin("system")


def system_end() -> SglRoleEnd:
    return SglRoleEnd("system")


def user_begin() -> SglRoleBegin:
    return SglRoleBegin("user")


def user_end() -> SglRoleEnd:
    return SglRoleEnd("user")


def assistant_begin() -> SglRoleBegin:
    return SglRoleBegin("assistant")


def assistant_end() -> SglRoleEnd:
    return SglRoleEnd("assistant")


def flush_cache(backend: Optional[Any] = None) -> bool:
    """Drop the server's prefix cache (False if it was busy)."""
    backend = backend or get_default_backend()
    if backend is None:
        raise ValueError("no backend: pass backend=... or call set_default_backend(...)")
    return backend.flush_cache()
