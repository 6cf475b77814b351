"""`radixlm.Engine`: the offline entry point, on the same processes and scheduler as the server.

    with radixlm.Engine() as engine:                      # None: the embedded SmolLM2
        out = engine.generate("The capital of France is", {"max_new_tokens": 8, "temperature": 0})
        print(out["text"], out["meta_info"]["cached_tokens"])

The Engine owns an asyncio loop in a background thread; the synchronous methods submit
coroutines to it. `generate(stream=True)` returns an iterator whose chunks carry the
text (and output ids) *added* since the previous chunk; closing it early aborts the request.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import logging
import queue
import threading
from typing import Any, AsyncIterator, Iterator, Optional, Union

from radixlm.managers.io_struct import GenerateReqInput
from radixlm.server_args import ServerArgs

logger = logging.getLogger(__name__)

PROGRESS_BAR_MIN_REQUESTS = 32
_DONE = object()


def _server_args(model_path: Optional[str], kwargs: dict) -> ServerArgs:
    names = {f.name for f in dataclasses.fields(ServerArgs)}
    unknown = sorted(set(kwargs) - names)
    if unknown:
        raise ValueError(f"unknown Engine argument(s): {', '.join(unknown)}")
    return ServerArgs(model_path=model_path, **kwargs)


class Engine:
    def __init__(self, model_path: Optional[str] = None, **server_args_kwargs: Any) -> None:
        from radixlm.entrypoints.launch import launch_subprocesses

        self.server_args = _server_args(model_path, server_args_kwargs).resolved()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="radixlm-engine-loop", daemon=True)
        self._thread.start()
        self.tokenizer_manager, self.children = launch_subprocesses(self.server_args)
        self._closed = False
        atexit.register(self.shutdown)

    # ---- helpers -------------------------------------------------------------------------
    def _run(self, coro: Any) -> Any:
        if self._closed:
            raise RuntimeError("the Engine is shut down")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    @staticmethod
    def _make_input(prompt: Any, sampling_params: Any, input_ids: Any, stream: bool, return_logprob: Any,
                    kwargs: dict) -> GenerateReqInput:
        from radixlm.managers.input_processor import unknown_request_keys

        bad = unknown_request_keys(kwargs)
        if bad:
            raise ValueError(f"unknown generate argument(s): {bad}")
        return GenerateReqInput(text=prompt, input_ids=input_ids, sampling_params=sampling_params, stream=stream,
                                return_logprob=return_logprob, **kwargs)

    @staticmethod
    def _num_outputs(obj: GenerateReqInput) -> int:
        prompts = obj.text if obj.text is not None else obj.input_ids
        num = len(prompts) if isinstance(prompts, list) and prompts and isinstance(prompts[0], (str, list)) else 1
        params = obj.sampling_params
        n = (params[0] if isinstance(params, list) and params else params or {}).get("n", 1)
        return num * (n if isinstance(n, int) else 1)

    async def _collect(self, obj: GenerateReqInput) -> Any:
        total = self._num_outputs(obj)
        bar = None
        if total >= PROGRESS_BAR_MIN_REQUESTS:
            from tqdm import tqdm

            bar = tqdm(total=total, desc="generate", leave=False)
        try:
            on_finish = (lambda _i: bar.update(1)) if bar is not None else None
            result = None
            async for out in self.tokenizer_manager.generate_request(obj, on_finish=on_finish):
                result = out
            return result
        finally:
            if bar is not None:
                bar.close()

    # ---- public API ----------------------------------------------------------------------
    def generate(self, prompt: Union[str, list[str], None] = None, sampling_params: Union[dict, list[dict], None] = None,
                 input_ids: Union[list[int], list[list[int]], None] = None, stream: bool = False,
                 return_logprob: Union[bool, list[bool]] = False, **kwargs: Any) -> Union[dict, list[dict], Iterator[dict]]:
        """One dict per prompt (a list for a batch or n > 1, prompt-major), or a stream of increments."""
        obj = self._make_input(prompt, sampling_params, input_ids, stream, return_logprob, kwargs)
        if stream:
            return self._stream(obj)
        return self._run(self._collect(obj))

    def _stream(self, obj: GenerateReqInput) -> Iterator[dict]:
        items: queue.Queue = queue.Queue()

        async def pump() -> None:
            try:
                async for out in self.tokenizer_manager.generate_request(obj):
                    items.put(out)
            except BaseException as e:  # noqa: BLE001 - handed to the consumer thread
                items.put(e)
            finally:
                items.put(_DONE)

        future = asyncio.run_coroutine_threadsafe(pump(), self.loop)
        return StreamIterator(items, future)

    async def async_generate(self, prompt: Union[str, list[str], None] = None,
                             sampling_params: Union[dict, list[dict], None] = None,
                             input_ids: Union[list[int], list[list[int]], None] = None, stream: bool = False,
                             return_logprob: Union[bool, list[bool]] = False,
                             **kwargs: Any) -> Union[dict, list[dict], AsyncIterator[dict]]:
        """Awaitable from any event loop; with stream=True returns an async iterator of increments."""
        obj = self._make_input(prompt, sampling_params, input_ids, stream, return_logprob, kwargs)
        if not stream:
            return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._collect(obj), self.loop))
        return self._async_stream(obj)

    async def _async_stream(self, obj: GenerateReqInput) -> AsyncIterator[dict]:
        sync_iter = self._stream(obj)
        try:
            while True:
                chunk = await asyncio.to_thread(next, sync_iter, _DONE)
                if chunk is _DONE:
                    return
                yield chunk
        finally:
            sync_iter.close()

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        self.loop.call_soon_threadsafe(self.tokenizer_manager.abort_request, rid, abort_all)

    def flush_cache(self) -> bool:
        return self._run(self.tokenizer_manager.flush_cache())

    def get_server_info(self) -> dict:
        return self._run(self.tokenizer_manager.get_server_info())

    @property
    def tokenizer(self) -> Any:
        return self.tokenizer_manager.tokenizer

    def shutdown(self) -> None:
        if getattr(self, "_closed", True):
            return
        self._closed = True
        self.tokenizer_manager.close()  # stop watching the children before they are terminated
        self.children.shutdown()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5.0)
        atexit.unregister(self.shutdown)

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


class StreamIterator:
    """Cumulative outputs -> increments (per `index` for batches). `close()` (or garbage collection)
    aborts the request even if iteration never started."""

    def __init__(self, items: queue.Queue, future: Any) -> None:
        self.items = items
        self.future = future
        self.seen: dict[int, tuple[int, int]] = {}
        self.done = False

    def __iter__(self) -> "StreamIterator":
        return self

    def __next__(self) -> dict:
        if self.done:
            raise StopIteration
        out = self.items.get()
        if out is _DONE:
            self.done = True
            raise StopIteration
        if isinstance(out, BaseException):
            self.close()
            raise out
        index = out.get("index", 0)
        text_len, ids_len = self.seen.get(index, (0, 0))
        self.seen[index] = (len(out["text"]), len(out["output_ids"]))
        return {**out, "text": out["text"][text_len:], "output_ids": out["output_ids"][ids_len:]}

    def close(self) -> None:
        self.done = True
        if not self.future.done():
            self.future.cancel()

    def __del__(self) -> None:
        self.close()
