"""`@function` programs: `run` (optionally streaming) and `run_batch`."""

from __future__ import annotations

import functools
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Callable, Optional, Union

from radixlm.lang.backend.base import BaseBackend
from radixlm.lang.interpreter import StreamExecutor
from radixlm.lang.ir import SglSamplingParams
from radixlm.lang.state import ProgramState
from radixlm.lang.tracer import common_prefix, trace_constant_prefix

_default_backend: Optional[BaseBackend] = None

MAX_AUTO_THREADS = 64


def set_default_backend(backend: Optional[BaseBackend]) -> None:
    global _default_backend
    _default_backend = backend


def get_default_backend() -> Optional[BaseBackend]:
    return _default_backend


def _resolve_backend(backend: Optional[BaseBackend]) -> BaseBackend:
    backend = backend or _default_backend
    if backend is None:
        raise ValueError("no backend: pass backend=... or call radixlm.set_default_backend(...)")
    return backend


class SglFunction:
    """A program: a Python function whose first parameter is the state `s`."""

    def __init__(self, func: Callable) -> None:
        self.func = func
        functools.update_wrapper(self, func)

    def __call__(self, *args: Any, **kwargs: Any) -> ProgramState:
        return self.run(*args, **kwargs)

    def run(self, *args: Any, max_new_tokens: int = 128, stop: Union[None, str, list[str]] = None,
            stop_token_ids: Optional[list[int]] = None, temperature: float = 1.0, top_p: float = 1.0,
            top_k: int = -1, min_p: float = 0.0, frequency_penalty: float = 0.0,
            presence_penalty: float = 0.0, ignore_eos: bool = False, stream: bool = False,
            backend: Optional[BaseBackend] = None, **kwargs: Any) -> ProgramState:
        """Run once. The sampling arguments are defaults for every `gen` that leaves them unset.

        With `stream=True` the program runs in a background thread and the state returns
        at once (read it with `text_iter()`); otherwise a failure raises here.
        """
        defaults = _sampling_defaults(max_new_tokens, stop, stop_token_ids, temperature, top_p, top_k,
                                      min_p, frequency_penalty, presence_penalty, ignore_eos)
        return run_program(self.func, _resolve_backend(backend), args, kwargs, defaults, stream)

    def run_batch(self, batch_kwargs: list[dict[str, Any]], *, max_new_tokens: int = 128,
                  stop: Union[None, str, list[str]] = None, stop_token_ids: Optional[list[int]] = None,
                  temperature: float = 1.0, top_p: float = 1.0, top_k: int = -1, min_p: float = 0.0,
                  frequency_penalty: float = 0.0, presence_penalty: float = 0.0, ignore_eos: bool = False,
                  backend: Optional[BaseBackend] = None, num_threads: Union[str, int] = "auto",
                  progress_bar: bool = False) -> list[ProgramState]:
        """Run once per kwargs dict, concurrently; states come back in input order.

        A failing item does not stop the others: its state's `error()` holds the exception.
        """
        defaults = _sampling_defaults(max_new_tokens, stop, stop_token_ids, temperature, top_p, top_k,
                                      min_p, frequency_penalty, presence_penalty, ignore_eos)
        return run_program_batch(self.func, _resolve_backend(backend), batch_kwargs, defaults,
                                 num_threads, progress_bar)


def _sampling_defaults(max_new_tokens, stop, stop_token_ids, temperature, top_p, top_k, min_p,
                       frequency_penalty, presence_penalty, ignore_eos) -> SglSamplingParams:
    return SglSamplingParams(
        max_new_tokens=max_new_tokens, stop=tuple([stop] if isinstance(stop, str) else stop or ()),
        stop_token_ids=tuple(stop_token_ids) if stop_token_ids else None, temperature=temperature,
        top_p=top_p, top_k=top_k, min_p=min_p, frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty, ignore_eos=ignore_eos,
    )


def run_program(func: Callable, backend: BaseBackend, args: tuple, kwargs: dict[str, Any],
                defaults: SglSamplingParams, stream: bool = False,
                raise_errors: bool = True) -> ProgramState:
    state = ProgramState(StreamExecutor(backend, defaults, stream))
    if stream:
        threading.Thread(target=_drive, args=(func, state, args, kwargs), daemon=True).start()
        return state
    _drive(func, state, args, kwargs)
    if raise_errors and state.stream_executor.error_ is not None:
        raise state.stream_executor.error_
    return state


def _drive(func: Callable, state: ProgramState, args: tuple, kwargs: dict[str, Any]) -> None:
    executor = state.stream_executor
    try:
        func(state, *args, **kwargs)
        executor.sync()
    except Exception as e:  # recorded on the state; run() re-raises, run_batch() does not
        executor.sync()  # what the program queued before failing still runs
        executor.set_error(e)
    finally:
        executor.end()


def run_program_batch(func: Callable, backend: BaseBackend, batch_kwargs: list[dict[str, Any]],
                      defaults: SglSamplingParams, num_threads: Union[str, int] = "auto",
                      progress_bar: bool = False) -> list[ProgramState]:
    if not batch_kwargs:
        return []
    if len(batch_kwargs) > 1:
        precache_constant_prefix(func, backend, batch_kwargs)
    workers = min(len(batch_kwargs), MAX_AUTO_THREADS) if num_threads == "auto" else max(int(num_threads), 1)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="radixlm-lang-batch") as pool:
        futures = {pool.submit(run_program, func, backend, (), kw, defaults, False, False): i
                   for i, kw in enumerate(batch_kwargs)}
        states: list[Optional[ProgramState]] = [None] * len(batch_kwargs)
        for future in _progress(as_completed(futures), len(futures), progress_bar):
            states[futures[future]] = future.result()
    return states  # type: ignore[return-value]


def precache_constant_prefix(func: Callable, backend: BaseBackend,
                             batch_kwargs: list[dict[str, Any]]) -> str:
    """Prefill the text every item starts with, once; returns that text ("" if none)."""
    template = backend.get_chat_template()
    prefix = common_prefix([trace_constant_prefix(func, template, kw) for kw in batch_kwargs])
    if prefix:
        backend.cache_prefix(prefix)
    return prefix


def _progress(iterable, total: int, enabled: bool):
    if not enabled:
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total)
