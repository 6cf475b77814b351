"""Grammar backends: compile a request's grammar off the scheduler's hot path, hand out matchers.

A constrained request names its grammar by a `GrammarKey` = (kind, text), kind one of
`GRAMMAR_KINDS`. The scheduler asks `backend.get_future(key)` when the request arrives
(compilation starts on a thread pool, cached by key), keeps the request in the waiting
queue while `backend.poll_ready(key)` is None, and then either gets a fresh per-request
`GrammarObject` or a `GrammarError` (end the request with a 400 that quotes it).

Backends register by name (`--grammar-backend`); `create_grammar_backend(name, ...)`
imports `radixlm.constrained.<name>_backend` on demand.
"""

from __future__ import annotations

import importlib
import time
from abc import ABC, abstractmethod
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence

import torch

GrammarKey = tuple[str, str]  # (kind, text)
GRAMMAR_KINDS = ("json", "regex", "ebnf", "structural_tag")
ANY_JSON = "$$ANY$$"  # ("json", ANY_JSON) = any JSON value (response_format json_object)

# The request parameter each kind comes from, for error messages.
KIND_TO_PARAM = {"json": "json_schema", "regex": "regex", "ebnf": "ebnf", "structural_tag": "structural_tag"}


class GrammarError(ValueError):
    """An invalid grammar or a compile timeout; `str(err)` names the parameter and quotes the cause.

    `poll_ready` RETURNS it (the scheduler aborts that one request with it);
    `validate_grammar_request` RAISES it (the TokenizerManager maps it to HTTP 400).
    """

    def __init__(self, param: str, message: str) -> None:
        self.param = param
        self.message = message
        super().__init__(f"invalid {param}: {message}")


class GrammarObject(ABC):
    """One request's matcher state. Not thread-safe: one owner (the scheduler) at a time."""

    @abstractmethod
    def accept_token(self, token_id: int) -> None:
        """Advance by one sampled token; raises ValueError if the grammar forbids it."""

    @abstractmethod
    def fill_vocab_mask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the allowed next tokens into `bitmask[row]` (int32 bit-packed, CPU)."""

    @abstractmethod
    def is_terminated(self) -> bool:
        """True once the grammar accepted a stop token: the request is finished."""

    @abstractmethod
    def rollback(self, num_tokens: int) -> None:
        """Undo the last `num_tokens` accepted tokens (including an accepted stop token)."""

    @abstractmethod
    def copy(self) -> "GrammarObject":
        """An independent matcher in the same state (one per sample when n > 1)."""

    @classmethod
    def fill_vocab_mask_batch(cls, objs: Sequence["GrammarObject"], bitmask: torch.Tensor, rows: Sequence[int]) -> None:
        """Fill `bitmask[rows[i]]` for `objs[i]`; backends override this with one batched call."""
        for obj, row in zip(objs, rows):
            obj.fill_vocab_mask(bitmask, row)


class GrammarBackend(ABC):
    """Compiles grammars on a thread pool with a (kind, text) cache; makes GrammarObjects.

    Subclasses implement `compile(key)` (raise on an invalid grammar), `new_object(compiled)`
    and the tokenizer-free `validate(kind, text)`.
    """

    def __init__(self, num_threads: int = 1, compile_timeout_s: float = 60.0) -> None:
        self.compile_timeout_s = compile_timeout_s
        self._executor = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="grammar-compile")
        self._futures: dict[GrammarKey, Future] = {}
        self._submitted_at: dict[GrammarKey, float] = {}

    # ---- what subclasses provide -------------------------------------------------
    @abstractmethod
    def compile(self, key: GrammarKey) -> Any:
        """Compile synchronously; raise (any exception) on an invalid grammar."""

    @abstractmethod
    def new_object(self, compiled: Any) -> GrammarObject:
        """A fresh matcher at the start of the compiled grammar."""

    @classmethod
    @abstractmethod
    def validate(cls, kind: str, text: str) -> None:
        """Fast syntax/schema check without a tokenizer; raise (any exception) if invalid."""

    # ---- the scheduler's API -------------------------------------------------------
    def get_future(self, key: GrammarKey) -> Future:
        """Start (or reuse) the compilation of `key`; never blocks. The future's result is
        the compiled grammar (shared by every request with this key) or its exception."""
        future = self._futures.get(key)
        if future is None:
            check_key(key)
            future = self._executor.submit(self.compile, key)
            self._futures[key] = future
            self._submitted_at[key] = time.monotonic()
        return future

    def poll_ready(self, key: GrammarKey) -> "GrammarObject | GrammarError | None":
        """None while compiling; then a new GrammarObject, or a GrammarError (invalid / timed out).

        The timeout counts from the key's first `get_future`; a timed-out compile keeps
        running and later requests with the same key use its result.
        """
        future = self.get_future(key)
        if not future.done():
            waited = time.monotonic() - self._submitted_at[key]
            if waited > self.compile_timeout_s:
                return GrammarError(param_of(key), f"grammar compilation timed out after {self.compile_timeout_s:g}s")
            return None
        err = future.exception()
        if err is not None:
            return err if isinstance(err, GrammarError) else GrammarError(param_of(key), clean_error(err))
        return self.new_object(future.result())

    def get_compiled(self, key: GrammarKey, timeout: Optional[float] = None) -> Any:
        """Block until `key` is compiled (tests, offline tools); raises GrammarError if invalid."""
        try:
            return self.get_future(key).result(timeout=timeout)
        except GrammarError:
            raise
        except Exception as err:  # noqa: BLE001 - any compile failure is the user's grammar
            raise GrammarError(param_of(key), clean_error(err)) from err

    def reset(self) -> None:
        """Drop finished entries of the cache (flush_cache); compilations in flight stay."""
        for key in [k for k, f in self._futures.items() if f.done()]:
            del self._futures[key], self._submitted_at[key]

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def param_of(key: GrammarKey) -> str:
    return KIND_TO_PARAM.get(key[0], key[0])


def check_key(key: GrammarKey) -> None:
    kind, text = key
    if kind not in GRAMMAR_KINDS:
        raise ValueError(f"unknown grammar kind {kind!r}; expected one of {GRAMMAR_KINDS}")
    if not isinstance(text, str):
        raise TypeError(f"grammar text for {kind!r} must be a str, got {type(text).__name__}")


def clean_error(err: BaseException) -> str:
    """xgrammar's message without its '[hh:mm:ss] /path/file.cc:123: ' log prefix."""
    msg = str(err).strip()
    if msg.startswith("[") and "] " in msg:
        rest = msg.split("] ", 1)[1]
        head, sep, tail = rest.partition(": ")
        if sep and ".cc:" in head:
            return tail.strip()
    return msg


# ---- registry ------------------------------------------------------------------------
GRAMMAR_BACKEND_REGISTRY: dict[str, type[GrammarBackend]] = {}


def register_grammar_backend(name: str) -> Callable[[type[GrammarBackend]], type[GrammarBackend]]:
    def wrap(cls: type[GrammarBackend]) -> type[GrammarBackend]:
        GRAMMAR_BACKEND_REGISTRY[name] = cls
        return cls

    return wrap


def get_grammar_backend_class(name: str) -> type[GrammarBackend]:
    if name not in GRAMMAR_BACKEND_REGISTRY:
        try:
            importlib.import_module(f"radixlm.constrained.{name}_backend")
        except ModuleNotFoundError as err:
            raise ValueError(f"unknown grammar backend {name!r}") from err
    if name not in GRAMMAR_BACKEND_REGISTRY:
        raise ValueError(f"unknown grammar backend {name!r}")
    return GRAMMAR_BACKEND_REGISTRY[name]


def create_grammar_backend(name: str, tokenizer: Any, vocab_size: int, **kwargs: Any) -> GrammarBackend:
    """`--grammar-backend` name -> backend over `tokenizer`, masks sized to the model's vocab."""
    return get_grammar_backend_class(name)(tokenizer, vocab_size, **kwargs)
