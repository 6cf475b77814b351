"""Per-request sampling parameters, named as SGLang names them.

`SamplingParams.from_dict` rejects unknown keys; `verify(vocab_size)` raises a
ValueError whose message names the offending parameter; `normalize()` turns the
user's `stop` (str | list) into a tuple and folds greedy settings together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional, Union

_GREEDY_EPS = 1e-6


@dataclass
class SamplingParams:
    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    min_p: float = 0.0
    stop: Optional[Union[str, list[str], tuple[str, ...]]] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    no_stop_trim: bool = False
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    n: int = 1
    seed: Optional[int] = None
    # token id -> bias added to that token's logit before sampling, in [-100, 100] (OpenAI's range);
    # keys may be JSON strings ("42"); normalize() turns them into ints
    logit_bias: Optional[dict[Union[str, int], float]] = None
    # Structured output (the constrained-decoding issue fills these in)
    json_schema: Optional[str] = None
    regex: Optional[str] = None
    ebnf: Optional[str] = None
    custom_params: Optional[dict] = field(default=None, repr=False)

    @classmethod
    def field_names(cls) -> set[str]:
        return {f.name for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, params: Optional[dict]) -> "SamplingParams":
        params = dict(params or {})
        unknown = sorted(set(params) - cls.field_names())
        if unknown:
            raise ValueError(f"unknown sampling parameter(s): {', '.join(unknown)}")
        return cls(**params)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def stop_strs(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        if isinstance(self.stop, str):
            return (self.stop,) if self.stop else ()
        return tuple(s for s in self.stop if s)

    @property
    def is_greedy(self) -> bool:
        return self.temperature < _GREEDY_EPS or self.top_k == 1

    def normalize(self) -> "SamplingParams":
        """Return a copy with canonical values (stop as a tuple, greedy folded into temperature 0)."""
        bias = {int(k): float(v) for k, v in self.logit_bias.items()} if self.logit_bias else None
        changes: dict[str, Any] = {"stop": self.stop_strs, "stop_token_ids": list(self.stop_token_ids or []),
                                   "logit_bias": bias}
        if self.is_greedy:
            changes.update(temperature=0.0, top_k=1)
        return dataclasses.replace(self, **changes)

    def verify(self, vocab_size: Optional[int] = None) -> None:
        """Raise ValueError naming the first invalid parameter."""
        _check_int("max_new_tokens", self.max_new_tokens, low=0)
        _check_int("min_new_tokens", self.min_new_tokens, low=0)
        if self.min_new_tokens > self.max_new_tokens:
            raise ValueError(f"min_new_tokens ({self.min_new_tokens}) must be <= max_new_tokens ({self.max_new_tokens})")
        _check_number("temperature", self.temperature)
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}")
        _check_number("top_p", self.top_p)
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        _check_int("top_k", self.top_k)
        if self.top_k < 1 and self.top_k != -1:
            raise ValueError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}")
        _check_number("min_p", self.min_p)
        if not 0 <= self.min_p <= 1:
            raise ValueError(f"min_p must be in [0, 1], got {self.min_p}")
        for name in ("frequency_penalty", "presence_penalty"):
            value = getattr(self, name)
            _check_number(name, value)
            if not -2 <= value <= 2:
                raise ValueError(f"{name} must be in [-2, 2], got {value}")
        _check_number("repetition_penalty", self.repetition_penalty)
        if not 0 < self.repetition_penalty <= 2:
            raise ValueError(f"repetition_penalty must be in (0, 2], got {self.repetition_penalty}")
        _check_int("n", self.n, low=1)
        if self.seed is not None:
            _check_int("seed", self.seed)
        self._verify_stop(vocab_size)
        self._verify_logit_bias(vocab_size)
        for name in ("ignore_eos", "skip_special_tokens", "no_stop_trim", "spaces_between_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        if sum(x is not None for x in (self.json_schema, self.regex, self.ebnf)) > 1:
            raise ValueError("only one of json_schema, regex, ebnf may be set")

    def _verify_stop(self, vocab_size: Optional[int]) -> None:
        stop = self.stop
        if stop is not None and not isinstance(stop, str):
            if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
                raise ValueError(f"stop must be a string or a list of strings, got {stop!r}")
        if self.stop_token_ids is not None:
            if not isinstance(self.stop_token_ids, (list, tuple)):
                raise ValueError(f"stop_token_ids must be a list of ints, got {self.stop_token_ids!r}")
            for tid in self.stop_token_ids:
                _check_int("stop_token_ids", tid, low=0)
                if vocab_size is not None and tid >= vocab_size:
                    raise ValueError(f"stop_token_ids entry {tid} is outside the vocabulary (size {vocab_size})")

    def _verify_logit_bias(self, vocab_size: Optional[int]) -> None:
        if self.logit_bias is None:
            return
        if not isinstance(self.logit_bias, dict):
            raise ValueError(f"logit_bias must be an object mapping token ids to biases, got {self.logit_bias!r}")
        for key, bias in self.logit_bias.items():
            token = _token_id(key)
            if token is None or token < 0 or (vocab_size is not None and token >= vocab_size):
                size = f" (size {vocab_size})" if vocab_size is not None else ""
                raise ValueError(f"logit_bias key {key!r} is not a token id in the vocabulary{size}")
            _check_number("logit_bias", bias)
            if not -100 <= bias <= 100:
                raise ValueError(f"logit_bias values must be in [-100, 100], got {bias} for token {token}")


def _token_id(key: Any) -> Optional[int]:
    """A logit_bias key as a token id: an int, or a string of decimal digits (JSON object keys); else None."""
    if isinstance(key, int) and not isinstance(key, bool):
        return key
    if isinstance(key, str) and key.strip().isdigit():
        return int(key)
    return None


def _check_number(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if value != value:  # NaN
        raise ValueError(f"{name} must not be NaN")


def _check_int(name: str, value: Any, low: Optional[int] = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
