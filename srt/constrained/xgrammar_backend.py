"""The xgrammar backend: JSON schema / regex / EBNF / structural tags over the tokenizer's vocab.

The token bitmask covers the MODEL's vocabulary (`vocab_size`, which may exceed the
tokenizer's): ids past the tokenizer are never allowed.
"""

from __future__ import annotations

import json
from typing import Any, Optional, Sequence

import torch
import xgrammar as xgr

from radixlm.constrained.base import (
    ANY_JSON, GrammarBackend, GrammarError, GrammarKey, GrammarObject, register_grammar_backend,
)


class XGrammarGrammar(GrammarObject):
    """One request's `xgrammar.GrammarMatcher`."""

    def __init__(self, matcher: xgr.GrammarMatcher, batch_matcher: Optional[xgr.BatchGrammarMatcher] = None) -> None:
        self.matcher = matcher
        self._batch_matcher = batch_matcher  # shared by the backend's objects, for batched fills

    def accept_token(self, token_id: int) -> None:
        if not self.matcher.accept_token(int(token_id)):
            state = "after termination" if self.matcher.is_terminated() else "here"
            raise ValueError(f"token {token_id} is not allowed by the grammar {state}")

    def fill_vocab_mask(self, bitmask: torch.Tensor, row: int) -> None:
        if self.matcher.is_terminated():
            self._fill_stop_only(bitmask, row)
        else:
            self.matcher.fill_next_token_bitmask(bitmask, row)

    def _fill_stop_only(self, bitmask: torch.Tensor, row: int) -> None:
        # A terminated request may still sit in a batch under the overlap loop; whatever it
        # samples is dropped, but keep the row legal: only stop tokens.
        bitmask[row].zero_()
        for tid in self.matcher.stop_token_ids:
            word, bit = divmod(tid, 32)
            value = 1 << bit
            bitmask[row, word] |= value - (1 << 32) if bit == 31 else value  # int32 sign bit

    def is_terminated(self) -> bool:
        return self.matcher.is_terminated()

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self.matcher.rollback(num_tokens)

    def copy(self) -> "XGrammarGrammar":
        return XGrammarGrammar(self.matcher.fork(), self._batch_matcher)

    @classmethod
    def fill_vocab_mask_batch(cls, objs: Sequence["XGrammarGrammar"], bitmask: torch.Tensor, rows: Sequence[int]) -> None:
        """One call for many rows: xgrammar fills them in C++ (multi-threaded when configured)."""
        live = [(o, r) for o, r in zip(objs, rows) if not o.matcher.is_terminated()]
        for obj, row in zip(objs, rows):
            if obj.matcher.is_terminated():
                obj._fill_stop_only(bitmask, row)
        if not live:
            return
        batch_matcher = live[0][0]._batch_matcher
        if batch_matcher is None or len(live) == 1:
            for obj, row in live:
                obj.matcher.fill_next_token_bitmask(bitmask, row)
            return
        batch_matcher.batch_fill_next_token_bitmask([o.matcher for o, _ in live], bitmask, [r for _, r in live])


@register_grammar_backend("xgrammar")
class XGrammarBackend(GrammarBackend):
    """`XGrammarBackend(tokenizer, vocab_size)`: compiles with a `GrammarCompiler` on a thread pool.

    tokenizer: a Hugging Face tokenizer. vocab_size: the model's (logits') vocab size.
    stop_token_ids: the model's EOS ids (default: xgrammar reads them from the tokenizer).
    num_threads: compile workers (a slow grammar does not hold up the others).
    mask_fill_threads: > 1 fills a batch's rows in parallel (xgrammar BatchGrammarMatcher).
    any_whitespace: let JSON output contain free whitespace (False = compact JSON, fewer
    ways for a small model to ramble).
    """

    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        *,
        stop_token_ids: Optional[Sequence[int]] = None,
        num_threads: int = 2,
        mask_fill_threads: int = 1,
        compile_timeout_s: float = 60.0,
        any_whitespace: bool = False,
    ) -> None:
        super().__init__(num_threads=num_threads, compile_timeout_s=compile_timeout_s)
        self.vocab_size = vocab_size
        self.any_whitespace = any_whitespace
        stops = sorted(set(stop_token_ids)) if stop_token_ids else None
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=max(1, num_threads))
        self._batch_matcher = xgr.BatchGrammarMatcher(max_threads=mask_fill_threads) if mask_fill_threads > 1 else None

    def compile(self, key: GrammarKey) -> xgr.CompiledGrammar:
        kind, text = key
        if kind == "json":
            if text == ANY_JSON:
                return self.compiler.compile_builtin_json_grammar()
            schema = bound_strings_by_pattern(check_json_text(text))
            return self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=self.any_whitespace)
        if kind == "regex":
            return self.compiler.compile_regex(text)
        if kind == "ebnf":
            return self.compiler.compile_grammar(text)
        return self.compiler.compile_structural_tag(text)

    def new_object(self, compiled: xgr.CompiledGrammar) -> XGrammarGrammar:
        return XGrammarGrammar(xgr.GrammarMatcher(compiled), self._batch_matcher)

    @classmethod
    def validate(cls, kind: str, text: str) -> None:
        """Parse into an `xgrammar.Grammar` (no tokenizer, well under a millisecond for small grammars)."""
        if kind == "json":
            if text != ANY_JSON:
                check_json_text(text)
                xgr.Grammar.from_json_schema(text)
        elif kind == "regex":
            xgr.Grammar.from_regex(text)
        elif kind == "ebnf":
            xgr.Grammar.from_ebnf(text)
        elif kind == "structural_tag":
            xgr.Grammar.from_structural_tag(text)
        else:
            raise ValueError(f"unknown grammar kind {kind!r}")


def check_json_text(text: str) -> "dict | bool":
    """A schema must be a JSON object (or boolean) before xgrammar sees it; returns it parsed."""
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as err:
        raise GrammarError("json_schema", f"not valid JSON: {err}") from err
    if not isinstance(schema, (dict, bool)):
        raise GrammarError("json_schema", f"a JSON schema must be an object, got {type(schema).__name__}")
    return schema


_DATA_KEYWORDS = ("enum", "const", "default", "examples")  # values there are data, not schemas


def bound_strings_by_pattern(schema: Any) -> Any:
    r"""Rewrite `minLength`/`maxLength` string schemas as `pattern: ^.{min,max}$` (a copy).

    xgrammar <= 0.2.9 lowers length-bounded strings to `[^"\\\r\n]{min,max}`, which lets
    raw control characters (U+0000-U+001F) through: invalid JSON (mlc-ai/xgrammar#800).
    Its `pattern` path is JSON-string aware and rejects them; `.` (no newline) generates a
    subset of what the original schema allows, so outputs still validate against it.
    """
    if isinstance(schema, list):
        return [bound_strings_by_pattern(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: v if k in _DATA_KEYWORDS else bound_strings_by_pattern(v) for k, v in schema.items()}
    types = out.get("type")
    is_string = types == "string" or (isinstance(types, list) and "string" in types)
    bounded = "minLength" in out or "maxLength" in out
    if is_string and bounded and "pattern" not in out and "format" not in out:
        low, high = int(out.pop("minLength", 0)), out.pop("maxLength", None)
        out["pattern"] = f"^.{{{low},{'' if high is None else int(high)}}}$"
    return out
