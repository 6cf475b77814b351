"""What the OpenAI handlers share: errors, request parsing, admission, sampling params, usage.

Every failure the client can fix is an `OpenAIError`; the HTTP layer renders it as the
OpenAI error body `{"object": "error", "message", "type", "param", "code"}`.
"""

from __future__ import annotations

import uuid
from typing import Any, AsyncIterator, Callable, Optional, TypeVar

import orjson
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ValidationError

from radixlm.constrained import response_format_to_json_schema, validate_grammar_request
from radixlm.entrypoints.json_response import JSONResponse
from radixlm.entrypoints.openai.protocol import ErrorResponse, PromptTokensDetails, SamplingFields, UsageInfo
from radixlm.managers.io_struct import GenerateReqInput
from radixlm.managers.tokenizer_manager import ServerUnhealthyError

ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    404: "NotFoundError",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}

# Extra model ids every server answers to (SGLang's examples use model="default").
MODEL_ALIASES = ("default",)

Req = TypeVar("Req", bound=BaseModel)


class OpenAIError(Exception):
    """A request failure with its HTTP status; `param` names the offending field."""

    def __init__(self, message: str, status: int = 400, param: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param


def error_response(status: int, message: str, param: Optional[str] = None) -> JSONResponse:
    body = ErrorResponse(message=message, type=ERROR_TYPES.get(status, "BadRequestError"), param=param, code=status)
    return JSONResponse(body.model_dump(), status_code=status)


def error_from_value_error(exc: ValueError) -> OpenAIError:
    """TokenizerManager validation errors name the parameter in their message (GrammarError also in `.param`)."""
    return OpenAIError(str(exc), 400, getattr(exc, "param", None))


def parse_json_body(raw: bytes) -> dict:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise OpenAIError(f"Malformed JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise OpenAIError(f"The request body must be a JSON object, got {type(body).__name__}")
    return body


def parse_model(cls: type[Req], body: dict) -> Req:
    try:
        return cls.model_validate(body)
    except ValidationError as exc:
        raise validation_error(exc) from None


def validation_error(exc: ValidationError) -> OpenAIError:
    first = exc.errors()[0]
    param = ".".join(str(part) for part in first["loc"]) or None
    raised = first.get("ctx", {}).get("error") if first["type"] == "value_error" else None
    msg = str(raised) if raised is not None else first["msg"]
    return OpenAIError(f"{param}: {msg}" if param else msg, 400, param)


async def read_request(raw_request: Request, cls: type[Req]) -> Req:
    return parse_model(cls, parse_json_body(await raw_request.body()))


def check_stream_options(req: SamplingFields) -> None:
    """stream_options belongs to streamed requests only: a 400 rather than an option silently ignored."""
    if req.stream_options is not None and not req.stream:
        raise OpenAIError("stream_options is only allowed when stream is true", 400, "stream_options")


def check_model(model: str, served_model_name: str) -> None:
    if model != served_model_name and model not in MODEL_ALIASES:
        raise OpenAIError(f"The model `{model}` does not exist (this server serves `{served_model_name}`)",
                          404, "model")


def check_max_tokens(max_tokens: Optional[int]) -> None:
    if max_tokens is not None and max_tokens < 0:
        raise OpenAIError(f"max_tokens must be >= 0, got {max_tokens}", 400, "max_tokens")


def check_context_length(prompt_tokens: int, max_new_tokens: Optional[int], context_len: int) -> None:
    if prompt_tokens >= context_len:
        raise OpenAIError(f"The prompt is {prompt_tokens} tokens long, which reaches the model's context length "
                          f"of {context_len} tokens; shorten the prompt", 400, "messages/prompt")
    if max_new_tokens is not None and prompt_tokens + max_new_tokens > context_len:
        raise OpenAIError(f"This model's maximum context length is {context_len} tokens, but {prompt_tokens} "
                          f"prompt tokens plus max_tokens={max_new_tokens} requested "
                          f"{prompt_tokens + max_new_tokens}; reduce the prompt or max_tokens", 400, "max_tokens")


def sampling_params(req: SamplingFields, max_new_tokens: int, grammar_backend: str = "xgrammar") -> dict:
    return {
        **grammar_params(req, grammar_backend),
        "max_new_tokens": max_new_tokens, "min_new_tokens": req.min_tokens,
        "temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k, "min_p": req.min_p,
        "n": req.n, "stop": req.stop, "stop_token_ids": req.stop_token_ids, "seed": req.seed,
        "presence_penalty": req.presence_penalty, "frequency_penalty": req.frequency_penalty,
        "repetition_penalty": req.repetition_penalty, "logit_bias": req.logit_bias, "ignore_eos": req.ignore_eos,
        "skip_special_tokens": req.skip_special_tokens, "no_stop_trim": req.no_stop_trim,
    }


def grammar_params(req: SamplingFields, grammar_backend: str) -> dict:
    """The output constraint: `response_format` (json_object / json_schema, onto the native `json_schema`),
    `regex` or `ebnf`; a 400 naming the parameter, quoting the grammar backend's error when it is invalid."""
    try:
        schema = response_format_to_json_schema(req.response_format)
    except ValueError as exc:
        raise OpenAIError(str(exc), 400, "response_format") from None
    given = {name: (kind, text) for name, kind, text in (
        ("response_format", "json", schema), ("regex", "regex", req.regex), ("ebnf", "ebnf", req.ebnf))
        if text is not None}
    if len(given) > 1:
        raise OpenAIError(f"only one of response_format, regex, ebnf may constrain the output; got "
                          f"{', '.join(given)}", 400, list(given)[1])
    for name, (kind, text) in given.items():
        try:
            validate_grammar_request(kind, text, param=name, backend=grammar_backend)
        except ValueError as exc:
            raise OpenAIError(str(exc), 400, name) from None
    return {_NATIVE_PARAM[kind]: text for kind, text in given.values()}


_NATIVE_PARAM = {"json": "json_schema", "regex": "regex", "ebnf": "ebnf"}


def new_rid(req: SamplingFields) -> str:
    return req.rid or uuid.uuid4().hex


def finish_reason(meta: dict) -> tuple[Optional[str], Any]:
    """TokenizerManager finish_reason dict -> (OpenAI finish_reason, matched_stop)."""
    reason = meta.get("finish_reason")
    if not reason:
        return None, None
    return reason.get("type"), reason.get("matched")


def build_usage(outputs: list[dict], n: int) -> UsageInfo:
    """Prompt tokens count once per prompt (every n-th output); completion tokens for all choices."""
    metas = [out["meta_info"] for out in outputs]
    prompt = sum(m["prompt_tokens"] for m in metas[::n])
    cached = sum(m.get("cached_tokens", 0) for m in metas[::n])
    completion = sum(m["completion_tokens"] for m in metas)
    return UsageInfo(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion,
                     prompt_tokens_details=PromptTokensDetails(cached_tokens=cached))


def stream_usage(req: SamplingFields, last: dict[int, dict]) -> Optional[UsageInfo]:
    """The final usage of a stream (stream_options.include_usage), from each choice's last output."""
    if not (req.stream_options and req.stream_options.include_usage):
        return None
    return build_usage([last[i] for i in sorted(last)], req.n)


def chunk_usage(req: SamplingFields, out: dict) -> Optional[UsageInfo]:
    """A chunk's usage under stream_options.continuous_usage_stats: its choice's prompt and tokens so far."""
    options = req.stream_options
    if not (options and options.include_usage and options.continuous_usage_stats):
        return None
    return build_usage([out], 1)


def token_text(token_id: int, text: Optional[str], tokenizer: Any) -> str:
    return text if text is not None else tokenizer.decode([token_id])


def sse(payload: Any) -> bytes:
    if isinstance(payload, BaseModel):
        payload = payload.model_dump()
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


class OpenAIServingBase:
    """Admission and the first-output handshake shared by every generating endpoint."""

    def __init__(self, tokenizer_manager: Any) -> None:
        self.tokenizer_manager = tokenizer_manager

    @property
    def tokenizer(self) -> Any:
        return self.tokenizer_manager.tokenizer

    @property
    def context_len(self) -> int:
        return self.tokenizer_manager.context_len

    @property
    def served_model_name(self) -> str:
        return self.tokenizer_manager.served_model_name

    async def handle(self, req: Any, raw_request: Optional[Request]) -> Response:
        """Plan the request, submit it, and answer with a JSON response or an SSE stream."""
        plan = self.plan(req)
        first, stream = await start_generation(self.tokenizer_manager, plan.obj, raw_request)
        if req.stream:
            return StreamingResponse(self.stream(plan, first, stream), media_type="text/event-stream")
        await stream.aclose()
        outputs = first if isinstance(first, list) else [first]
        return JSONResponse(self.response(plan, outputs).model_dump())

    def plan(self, req: Any) -> Any:
        raise NotImplementedError

    def stream(self, plan: Any, first: dict, stream: AsyncIterator) -> AsyncIterator[bytes]:
        raise NotImplementedError

    def response(self, plan: Any, outputs: list[dict]) -> BaseModel:
        raise NotImplementedError


def check_queue(tokenizer_manager: Any) -> None:
    limit = tokenizer_manager.server_args.max_queued_requests
    if limit is not None and tokenizer_manager.num_queued_requests() >= limit:
        raise OpenAIError(f"Too many queued requests (limit --max-queued-requests={limit}); retry later", 503)


async def start_generation(tokenizer_manager: Any, obj: GenerateReqInput,
                           raw_request: Optional[Request]) -> tuple[Any, AsyncIterator]:
    if not tokenizer_manager.is_healthy():
        raise OpenAIError(f"The server is unhealthy: {tokenizer_manager.dead_reason}", 503)
    check_queue(tokenizer_manager)
    stream = tokenizer_manager.generate_request(obj, raw_request).__aiter__()
    try:
        first = await stream.__anext__()
    except ValueError as exc:
        raise error_from_value_error(exc) from None
    except ServerUnhealthyError as exc:
        raise OpenAIError(str(exc), 503) from None
    except StopAsyncIteration:
        raise OpenAIError("The request produced no output", 500) from None
    return first, stream


async def sse_stream(tokenizer_manager: Any, first: dict, stream: AsyncIterator,
                     chunks: Callable[[dict], list[bytes]], final_chunk: Callable[[], Optional[bytes]],
                     rid: Any) -> AsyncIterator[bytes]:
    """Server-sent events for every output (`first`, then the rest of `stream`), the optional
    final chunk (usage), then `[DONE]`. A client that goes away mid-stream aborts its requests."""
    exhausted = False
    try:
        for chunk in chunks(first):
            yield chunk
        async for out in stream:
            for chunk in chunks(out):
                yield chunk
        exhausted = True
        final = final_chunk()
        if final is not None:
            yield final
    except ValueError as exc:
        yield sse({"error": {"message": str(exc), "type": "BadRequestError", "code": 400}})
    except ServerUnhealthyError as exc:  # a child died mid-stream: say so before [DONE]
        yield sse({"error": {"message": str(exc), "type": "ServiceUnavailableError", "code": 503}})
    finally:
        await close_generation(tokenizer_manager, stream, rid, finished=exhausted)
    yield SSE_DONE


async def close_generation(tokenizer_manager: Any, stream: AsyncIterator, rid: Any, finished: bool) -> None:
    """End a generation; one that stopped early (client gone) aborts its requests to free their slots."""
    try:
        await stream.aclose()
    finally:
        if not finished:
            for one in rid if isinstance(rid, list) else [rid]:
                tokenizer_manager.abort_request(one)
