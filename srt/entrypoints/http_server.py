"""The HTTP server: OpenAI-compatible routes, SGLang's native routes, health and metrics.

`create_app(tokenizer_manager, server_args)` builds the FastAPI app over a running
TokenizerManager; `radixlm.launch_server` starts the processes and serves it with uvicorn.
Every error body is OpenAI's `{"object": "error", "message", "type", "param", "code"}`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import logging
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

from fastapi import FastAPI, Request
from fastapi.responses import Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST

from radixlm.entrypoints.json_response import JSONResponse
from radixlm.entrypoints.openai.protocol import (
    ChatCompletionRequest, CompletionRequest, DetokenizeRequest, TokenizeRequest,
)
from radixlm.entrypoints.openai.serving_base import (
    OpenAIError, error_response, parse_json_body, read_request, sse, sse_stream, start_generation,
)
from radixlm.entrypoints.openai.serving_chat import OpenAIServingChat, load_chat_template
from radixlm.entrypoints.openai.serving_completions import OpenAIServingCompletion
from radixlm.entrypoints.openai.serving_tokenize import OpenAIServingTokenize
from radixlm.managers import hop_trace
from radixlm.managers.io_struct import GenerateReqInput
from radixlm.reasoning_parser import REASONING_PARSERS, separate
from radixlm.server_args import ServerArgs

logger = logging.getLogger(__name__)

# Open even with --api-key: probes and scrapers carry no token.
UNAUTHENTICATED_PATHS = ("/health", "/health_generate", "/metrics")
HEALTH_GENERATE_TIMEOUT_S = 30.0


@dataclasses.dataclass
class ServerState:
    tokenizer_manager: Any
    server_args: ServerArgs
    chat: OpenAIServingChat
    completion: OpenAIServingCompletion
    tokenize: OpenAIServingTokenize


def create_app(tokenizer_manager: Any, server_args: ServerArgs) -> FastAPI:
    app = FastAPI(default_response_class=JSONResponse)
    app.state.server = ServerState(
        tokenizer_manager=tokenizer_manager, server_args=server_args,
        chat=OpenAIServingChat(tokenizer_manager, load_chat_template(server_args.chat_template),
                               server_args.tool_call_parser, server_args.reasoning_parser),
        completion=OpenAIServingCompletion(tokenizer_manager),
        tokenize=OpenAIServingTokenize(tokenizer_manager),
    )
    app.add_exception_handler(OpenAIError, _openai_error_handler)
    app.add_exception_handler(Exception, _internal_error_handler)
    if server_args.api_key:
        app.middleware("http")(_api_key_middleware(server_args.api_key))
    _add_openai_routes(app)
    _add_native_routes(app)
    if server_args.enable_metrics:
        app.add_api_route("/metrics", _metrics, methods=["GET"])
    return app


def _state(raw_request: Request) -> ServerState:
    return raw_request.app.state.server


async def _openai_error_handler(_: Request, exc: OpenAIError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.param)


async def _internal_error_handler(_: Request, exc: Exception) -> JSONResponse:
    logger.exception("unhandled error in a request")
    return error_response(500, f"Internal server error: {type(exc).__name__}: {exc}")


def _api_key_middleware(api_key: str) -> Callable:
    expected = f"Bearer {api_key}".encode()

    async def check(raw_request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if raw_request.method == "OPTIONS" or raw_request.url.path in UNAUTHENTICATED_PATHS:
            return await call_next(raw_request)
        given = raw_request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            return error_response(401, "Missing or invalid API key (send Authorization: Bearer <key>)")
        return await call_next(raw_request)

    return check


# ---- OpenAI-compatible routes -----------------------------------------------------------


def _add_openai_routes(app: FastAPI) -> None:
    app.add_api_route("/v1/completions", _completions, methods=["POST"])
    app.add_api_route("/v1/chat/completions", _chat_completions, methods=["POST"])
    app.add_api_route("/v1/models", _models, methods=["GET"])
    app.add_api_route("/v1/models/{model:path}", _model, methods=["GET"])
    app.add_api_route("/v1/tokenize", _tokenize, methods=["POST"])
    app.add_api_route("/v1/detokenize", _detokenize, methods=["POST"])


async def _completions(raw_request: Request) -> Response:
    req = await read_request(raw_request, CompletionRequest)
    return await _state(raw_request).completion.handle(req, raw_request)


async def _chat_completions(raw_request: Request) -> Response:
    req = await read_request(raw_request, ChatCompletionRequest)
    return await _state(raw_request).chat.handle(req, raw_request)


async def _models(raw_request: Request) -> dict:
    return _state(raw_request).tokenize.models().model_dump()


async def _model(model: str, raw_request: Request) -> dict:
    return _state(raw_request).tokenize.model(model).model_dump()


async def _tokenize(raw_request: Request) -> dict:
    return _state(raw_request).tokenize.tokenize(await read_request(raw_request, TokenizeRequest))


async def _detokenize(raw_request: Request) -> dict:
    return _state(raw_request).tokenize.detokenize(await read_request(raw_request, DetokenizeRequest))


# ---- native (SGLang) routes ---------------------------------------------------------------


def _add_native_routes(app: FastAPI) -> None:
    app.add_api_route("/generate", _generate, methods=["POST", "PUT"])
    app.add_api_route("/health", _health, methods=["GET"])
    app.add_api_route("/health_generate", _health_generate, methods=["GET"])
    app.add_api_route("/get_model_info", _get_model_info, methods=["GET"])
    app.add_api_route("/get_server_info", _get_server_info, methods=["GET"])
    app.add_api_route("/flush_cache", _flush_cache, methods=["GET", "POST"])
    app.add_api_route("/abort_request", _abort_request, methods=["POST"])
    app.add_api_route("/separate_reasoning", _separate_reasoning, methods=["POST"])


def native_request(body: dict) -> GenerateReqInput:
    known = {f.name for f in dataclasses.fields(GenerateReqInput)}
    unknown = sorted(set(body) - known)
    if unknown:
        raise OpenAIError(f"unknown field(s) in the generate request: {', '.join(unknown)}", 400, unknown[0])
    obj = GenerateReqInput(**body)
    if obj.rid is None and not _is_batch(obj):
        obj.rid = uuid.uuid4().hex
    return obj


def _is_batch(obj: GenerateReqInput) -> bool:
    if isinstance(obj.text, list):
        return True
    return isinstance(obj.input_ids, list) and bool(obj.input_ids) and isinstance(obj.input_ids[0], list)


async def _generate(raw_request: Request) -> Response:
    hop_trace.mark("http_in")
    tm = _state(raw_request).tokenizer_manager
    obj = native_request(parse_json_body(await raw_request.body()))
    first, stream = await start_generation(tm, obj, raw_request)
    hop_trace.mark("http_out")
    if not obj.stream:
        await stream.aclose()
        return JSONResponse(first)
    return StreamingResponse(_native_stream(tm, obj, first, stream), media_type="text/event-stream")


def _native_stream(tm: Any, obj: GenerateReqInput, first: dict, stream: AsyncIterator) -> AsyncIterator[bytes]:
    """SGLang's stream: every output dict (cumulative text) as one event, then `[DONE]`."""
    return sse_stream(tm, first, stream, lambda out: [sse(out)], lambda: None, obj.rid)


async def _health(raw_request: Request) -> Response:
    tm = _state(raw_request).tokenizer_manager
    if not tm.is_healthy():
        return error_response(503, f"unhealthy: {tm.dead_reason}")
    return Response(status_code=200)


async def _health_generate(raw_request: Request) -> Response:
    """Liveness through the whole pipeline: a one-token greedy generation."""
    tm = _state(raw_request).tokenizer_manager
    obj = GenerateReqInput(input_ids=[0], sampling_params={"max_new_tokens": 1, "temperature": 0.0},
                           rid=f"health-{uuid.uuid4().hex}", log_metrics=False)
    try:
        await asyncio.wait_for(_drain(tm.generate_request(obj)), HEALTH_GENERATE_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 -- any failure means unhealthy
        tm.abort_request(obj.rid)
        return error_response(503, f"health generation failed: {type(exc).__name__}: {exc}")
    return Response(status_code=200)


async def _drain(stream: AsyncIterator) -> None:
    async for _ in stream:
        pass


async def _get_model_info(raw_request: Request) -> dict:
    tm = _state(raw_request).tokenizer_manager
    args = tm.server_args
    return {"model_path": args.model_path or tm.served_model_name,
            "tokenizer_path": args.tokenizer_path or args.model_path or tm.served_model_name,
            "is_generation": True}


async def _get_server_info(raw_request: Request) -> dict:
    return await _state(raw_request).tokenizer_manager.get_server_info()


async def _flush_cache(raw_request: Request) -> Response:
    if not await _state(raw_request).tokenizer_manager.flush_cache():
        return error_response(400, "Cache not flushed: requests are running or queued; retry when idle")
    return Response("Cache flushed.\n", status_code=200)


async def _abort_request(raw_request: Request) -> Response:
    body = parse_json_body(await raw_request.body())
    rid: Optional[Any] = body.get("rid", "")
    abort_all = body.get("abort_all", False)
    if not isinstance(rid, str) or not isinstance(abort_all, bool):
        raise OpenAIError("abort_request takes {\"rid\": str} or {\"abort_all\": true}", 400, "rid")
    if not rid and not abort_all:
        raise OpenAIError("abort_request needs a rid or abort_all: true", 400, "rid")
    _state(raw_request).tokenizer_manager.abort_request(rid=rid, abort_all=abort_all)
    return Response(status_code=200)


async def _separate_reasoning(raw_request: Request) -> dict:
    """`{"text", "reasoning_parser"}` -> `{"text": the answer, "reasoning_text"}` (the parser defaults to the
    server's `--reasoning-parser`; with no prompt to read, the output starts in the block for `always` formats)."""
    body = parse_json_body(await raw_request.body())
    text, name = body.get("text"), body.get("reasoning_parser", _state(raw_request).server_args.reasoning_parser)
    if not isinstance(text, str):
        raise OpenAIError("separate_reasoning takes {\"text\": str, \"reasoning_parser\": str}", 400, "text")
    if name not in REASONING_PARSERS:
        raise OpenAIError(f"reasoning_parser must be one of {tuple(REASONING_PARSERS)}, got {name!r}", 400,
                          "reasoning_parser")
    fmt = REASONING_PARSERS[name]
    reasoning, content = separate(text, fmt, fmt.always)
    return {"text": content, "reasoning_text": reasoning or ""}


async def _metrics(raw_request: Request) -> Response:
    tm = _state(raw_request).tokenizer_manager
    collector = tm.metrics_collector
    collector.observe_scheduler_stats(await tm.get_server_info())
    return Response(collector.render(), media_type=CONTENT_TYPE_LATEST)
