"""Streaming request functions, one per backend, all returning a `RequestOutput`.

- `radixlm`: native `POST /generate` (also fits SGLang). Each `data:` line carries the
  cumulative `output_ids` and `meta_info`, so a chunk's token count is exact.
- `openai`: `POST /v1/completions`; `openai-chat`: `POST /v1/chat/completions`. A chunk's
  token count comes from per-chunk `usage.completion_tokens` when the server sends it
  (`stream_options.continuous_usage_stats`); otherwise each chunk with text counts as one
  token, and the final usage (`stream_options.include_usage`) gives the request's totals.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import AsyncIterator, Awaitable, Callable

import aiohttp

from radixlm.benchmark.serving_metrics import RequestOutput


@dataclass(frozen=True)
class RequestInput:
    prompt: str
    prompt_ids: list[int]
    prompt_len: int
    output_len: int
    model: str = ""
    send_token_ids: bool = False
    ignore_eos: bool = True
    extra_body: dict = field(default_factory=dict)


async def iter_sse(response: aiohttp.ClientResponse) -> AsyncIterator[dict]:
    """The JSON payloads of `data:` lines, up to `data: [DONE]`."""
    async for raw in response.content:
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            return
        yield json.loads(payload)


async def _stream(session: aiohttp.ClientSession, url: str, body: dict, req: RequestInput,
                  on_chunk: Callable[[dict, RequestOutput, float], None]) -> RequestOutput:
    out = RequestOutput(prompt_len=req.prompt_len)
    start = time.perf_counter()
    try:
        async with session.post(url, json=body) as response:
            if response.status != 200:
                out.error = f"HTTP {response.status}: {(await response.text())[:200]}"
                return out
            async for chunk in iter_sse(response):
                if "error" in chunk:
                    out.error = str(chunk["error"])[:200]
                    return out
                on_chunk(chunk, out, time.perf_counter() - start)
        out.latency = time.perf_counter() - start
        out.output_len = out.output_len or sum(out.chunk_tokens)
        out.success = bool(out.chunk_times)
        out.error = "" if out.success else "no output tokens"
    except (aiohttp.ClientError, asyncio.TimeoutError, json.JSONDecodeError, UnicodeDecodeError) as e:
        out.error = f"{type(e).__name__}: {e}"
    return out


def _apply_usage(usage: dict | None, out: RequestOutput) -> None:
    if not usage:
        return
    out.prompt_len = usage.get("prompt_tokens") or out.prompt_len
    out.output_len = usage.get("completion_tokens") or out.output_len
    details = usage.get("prompt_tokens_details") or {}
    out.cached_tokens = details.get("cached_tokens") or usage.get("cached_tokens") or out.cached_tokens


async def send_radixlm(session: aiohttp.ClientSession, base_url: str, req: RequestInput) -> RequestOutput:
    sampling = {"temperature": 0.0, "max_new_tokens": req.output_len, "ignore_eos": req.ignore_eos}
    body = {"sampling_params": sampling, "stream": True, **req.extra_body}
    body.update({"input_ids": req.prompt_ids} if req.send_token_ids else {"text": req.prompt})
    seen = [0]

    def on_chunk(chunk: dict, out: RequestOutput, elapsed: float) -> None:
        meta = chunk.get("meta_info", {})
        total = meta.get("completion_tokens", len(chunk.get("output_ids", [])))
        out.add_chunk(elapsed, total - seen[0])
        seen[0] = max(seen[0], total)
        out.generated_text = chunk.get("text", out.generated_text)
        out.prompt_len = meta.get("prompt_tokens", out.prompt_len)
        out.output_len = total
        out.cached_tokens = meta.get("cached_tokens", out.cached_tokens)

    return await _stream(session, f"{base_url}/generate", body, req, on_chunk)


def _openai_chunk_handler(text_of: Callable[[dict], str]) -> Callable[[dict, RequestOutput, float], None]:
    seen = [0]

    def on_chunk(chunk: dict, out: RequestOutput, elapsed: float) -> None:
        usage = chunk.get("usage")
        text = "".join(text_of(c) or "" for c in chunk.get("choices") or [])
        if usage and usage.get("completion_tokens") is not None and chunk.get("choices"):
            new_tokens = usage["completion_tokens"] - seen[0]  # continuous usage stats
            seen[0] = usage["completion_tokens"]
        else:
            new_tokens = 1 if text else 0
        out.add_chunk(elapsed, new_tokens)
        out.generated_text += text
        _apply_usage(usage, out)

    return on_chunk


def _openai_body(req: RequestInput) -> dict:
    body = {"model": req.model, "max_tokens": req.output_len, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    if req.ignore_eos:
        body["ignore_eos"] = True  # an extension SGLang- and vLLM-style servers accept
    return body


async def send_openai(session: aiohttp.ClientSession, base_url: str, req: RequestInput) -> RequestOutput:
    body = {**_openai_body(req), "prompt": req.prompt_ids if req.send_token_ids else req.prompt, **req.extra_body}
    handler = _openai_chunk_handler(lambda c: c.get("text", ""))
    return await _stream(session, f"{base_url}/v1/completions", body, req, handler)


async def send_openai_chat(session: aiohttp.ClientSession, base_url: str, req: RequestInput) -> RequestOutput:
    body = {**_openai_body(req), "messages": [{"role": "user", "content": req.prompt}], **req.extra_body}
    handler = _openai_chunk_handler(lambda c: (c.get("delta") or {}).get("content", ""))
    return await _stream(session, f"{base_url}/v1/chat/completions", body, req, handler)


SendFn = Callable[[aiohttp.ClientSession, str, RequestInput], Awaitable[RequestOutput]]

BACKENDS: dict[str, SendFn] = {
    "radixlm": send_radixlm,
    "openai": send_openai,
    "openai-chat": send_openai_chat,
}

# Backends that can send the prompt as token ids (`--tokenize-prompt`).
TOKEN_ID_BACKENDS = {"radixlm", "openai"}
