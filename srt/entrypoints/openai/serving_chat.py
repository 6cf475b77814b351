"""`/v1/chat/completions`: messages -> chat template -> token ids -> response or SSE stream.

The template is the tokenizer's own (`tokenizer_config.json`'s chat_template) unless `--chat-template` names a
Jinja file. A stream sends, per choice, a role chunk, content deltas and a finish-reason chunk; then a usage chunk
(stream_options.include_usage; with continuous_usage_stats every chunk also carries its choice's usage so far);
then `[DONE]`. With tools (chat_tools.py), a call's text is held back from content: each call goes out once its
name is known, its arguments piece by piece after it, and the finish-reason chunk then says "tool_calls". With
`--reasoning-parser` (chat_reasoning.py), the thinking goes to `reasoning_content` and only the answer to content
and tool calls.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, AsyncIterator, Optional

from radixlm.entrypoints.openai.chat_reasoning import (
    ChatReasoningStream, ReasoningPlan, output_thinks_first, plan_reasoning,
)
from radixlm.entrypoints.openai.chat_tools import (
    ToolPlan, ToolRequestError, delta_tool_calls, openai_tool_calls, plan_tools, template_message,
)
from radixlm.entrypoints.openai.protocol import (
    ChatCompletionChoice, ChatCompletionRequest, ChatCompletionResponse, ChatCompletionStreamResponse,
    ChatResponseMessage, ChatStreamChoice, ChatTokenLogprob, ChoiceLogprobs, DeltaMessage,
    TopLogprob,
)
from radixlm.entrypoints.openai.serving_base import (
    OpenAIError, OpenAIServingBase, build_usage, check_context_length, check_max_tokens, check_model,
    check_stream_options, chunk_usage, finish_reason, new_rid, sampling_params, sse, sse_stream, stream_usage,
    token_text,
)
from radixlm.function_call import CallDelta, ToolStreamBuffer
from radixlm.managers.io_struct import GenerateReqInput

MAX_TOP_LOGPROBS = 20
# apply_chat_template's own arguments, which chat_template_kwargs may not replace
RESERVED_TEMPLATE_KWARGS = frozenset({"conversation", "messages", "tools", "documents", "chat_template", "tokenize",
                                      "add_generation_prompt", "continue_final_message", "return_dict",
                                      "return_assistant_tokens_mask", "padding", "truncation", "max_length",
                                      "return_tensors", "tokenizer_kwargs"})


def load_chat_template(path: Optional[str]) -> Optional[str]:
    """`--chat-template`: a Jinja file (its text is the template); None keeps the tokenizer's."""
    if path is None:
        return None
    if not os.path.isfile(path):
        raise ValueError(f"--chat-template file not found: {path!r}")
    with open(path, encoding="utf-8") as f:
        return f.read()


@dataclasses.dataclass
class ChatPlan:
    request: ChatCompletionRequest
    rid: str
    obj: GenerateReqInput
    tools: Optional[ToolPlan] = None
    reasoning: Optional[ReasoningPlan] = None


class OpenAIServingChat(OpenAIServingBase):
    def __init__(self, tokenizer_manager: Any, chat_template: Optional[str] = None,
                 tool_call_parser: Optional[str] = None, reasoning_parser: Optional[str] = None) -> None:
        super().__init__(tokenizer_manager)
        self.chat_template = chat_template
        self.tool_call_parser = tool_call_parser
        self.reasoning_parser = reasoning_parser

    # ---- request -> plan --------------------------------------------------------------

    def plan(self, req: ChatCompletionRequest) -> ChatPlan:
        check_model(req.model, self.served_model_name)
        check_stream_options(req)
        if req.top_logprobs is not None:
            if not req.logprobs:
                raise OpenAIError("top_logprobs requires logprobs to be true", 400, "top_logprobs")
            if not 0 <= req.top_logprobs <= MAX_TOP_LOGPROBS:
                raise OpenAIError(f"top_logprobs must be in [0, {MAX_TOP_LOGPROBS}], got {req.top_logprobs}",
                                  400, "top_logprobs")
        grammar_backend = self.tokenizer_manager.server_args.grammar_backend
        try:
            tools = plan_tools(req, self.tool_call_parser, grammar_backend)
        except ToolRequestError as exc:
            raise OpenAIError(str(exc), 400, exc.param) from None
        prompt = self.prompt_text(req, tools)
        prompt_ids = self.tokenizer.encode(prompt, add_special_tokens=False)
        max_new = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        check_max_tokens(max_new)
        check_context_length(len(prompt_ids), max_new, self.context_len)
        if max_new is None:
            max_new = self.context_len - len(prompt_ids)
        rid = new_rid(req)
        params = sampling_params(req, max_new, grammar_backend)
        if tools is not None and tools.json_schema is not None:
            params["json_schema"] = tools.json_schema
        constrained = any(params.get(k) is not None for k in ("json_schema", "regex", "ebnf"))
        thinks_first = output_thinks_first(req, self.reasoning_parser, prompt)
        obj = GenerateReqInput(
            input_ids=prompt_ids, rid=rid, sampling_params=params,
            return_logprob=req.logprobs, top_logprobs_num=req.top_logprobs or 0,
            return_text_in_logprobs=True, stream=req.stream, cache_salt=req.cache_salt,
            require_reasoning=constrained and thinks_first,
        )
        return ChatPlan(req, rid, obj, tools, plan_reasoning(req, self.reasoning_parser, thinks_first))

    def prompt_text(self, req: ChatCompletionRequest, tools: Optional[ToolPlan] = None) -> str:
        """The chat rendered through the template (with the request's tools and chat_template_kwargs)."""
        messages = [template_message(m) for m in req.messages]
        if req.continue_final_message and messages[-1]["role"] != "assistant":
            raise OpenAIError("continue_final_message needs the last message to be from the assistant",
                              400, "continue_final_message")
        extra = req.chat_template_kwargs or {}
        clash = sorted(RESERVED_TEMPLATE_KWARGS & set(extra))
        if clash:
            raise OpenAIError(f"chat_template_kwargs may not set {', '.join(clash)} (set by the request itself)",
                              400, "chat_template_kwargs")
        try:
            return self.tokenizer.apply_chat_template(
                messages, tokenize=False, chat_template=self.chat_template,
                tools=tools.template_tools if tools is not None else None,
                add_generation_prompt=not req.continue_final_message,
                continue_final_message=req.continue_final_message, **extra)
        except Exception as exc:  # jinja raise_exception / malformed template input
            raise OpenAIError(f"Could not apply the chat template: {exc}", 400, "messages") from None

    # ---- outputs -> response ------------------------------------------------------------

    def response(self, plan: ChatPlan, outputs: list[dict]) -> ChatCompletionResponse:
        choices = []
        for index, out in enumerate(outputs):
            reason, matched = finish_reason(out["meta_info"])
            reasoning, text = plan.reasoning.split(out["text"]) if plan.reasoning else (None, out["text"])
            message = ChatResponseMessage(content=text, reasoning_content=reasoning)
            if plan.tools is not None:
                content, calls = plan.tools.split(text)
                if calls:
                    message = ChatResponseMessage(content=content, reasoning_content=reasoning,
                                                  tool_calls=openai_tool_calls(calls))
                    reason = "tool_calls"
            choices.append(ChatCompletionChoice(
                index=index, message=message, finish_reason=reason,
                matched_stop=matched, logprobs=self.logprobs(plan, out, 0)))
        return ChatCompletionResponse(id=f"chatcmpl-{plan.rid}", model=plan.request.model, choices=choices,
                                      usage=build_usage(outputs, plan.request.n))

    def logprobs(self, plan: ChatPlan, out: dict, sent: int) -> Optional[ChoiceLogprobs]:
        if not plan.request.logprobs:
            return None
        meta = out["meta_info"]
        tokens = (meta.get("output_token_logprobs") or [])[sent:]
        tops = (meta.get("output_top_logprobs") or [])[sent:]
        content = []
        for i, (logprob, token_id, text) in enumerate(tokens):
            top = tops[i] if i < len(tops) and tops[i] is not None else []
            content.append(ChatTokenLogprob(**self.top_entry(logprob, token_id, text).model_dump(),
                                            top_logprobs=[self.top_entry(*t) for t in top]))
        return ChoiceLogprobs(content=content)

    def top_entry(self, logprob: float, token_id: int, text: Optional[str]) -> TopLogprob:
        token = token_text(token_id, text, self.tokenizer)
        return TopLogprob(token=token, logprob=logprob, bytes=list(token.encode("utf-8")))

    # ---- streaming ------------------------------------------------------------------------

    def stream(self, plan: ChatPlan, first: dict, stream: AsyncIterator) -> AsyncIterator[bytes]:
        state = _ChatStreamState()

        def usage_chunk() -> Optional[bytes]:
            usage = stream_usage(plan.request, state.last)
            return usage and sse(ChatCompletionStreamResponse(
                id=f"chatcmpl-{plan.rid}", model=plan.request.model, choices=[], usage=usage))

        return sse_stream(self.tokenizer_manager, first, stream, lambda out: self.chunks(plan, state, out),
                          usage_chunk, plan.rid)

    def chunks(self, plan: ChatPlan, state: "_ChatStreamState", out: dict) -> list[bytes]:
        index = out.get("index", 0)
        state.last[index] = out
        chunks = []
        usage = chunk_usage(plan.request, out)

        def emit(delta: DeltaMessage, **fields: Any) -> None:
            choice = ChatStreamChoice(index=index, delta=delta, **fields)
            chunks.append(sse(ChatCompletionStreamResponse(id=f"chatcmpl-{plan.rid}", model=plan.request.model,
                                                           choices=[choice], usage=usage)))

        if index not in state.choices:
            state.choices[index] = _ChoiceStream(
                plan.tools.buffer(incremental=True) if plan.tools is not None else None,
                plan.reasoning.stream() if plan.reasoning is not None else None)
            emit(DeltaMessage(role="assistant", content=""))
        choice = state.choices[index]
        reason, matched = finish_reason(out["meta_info"])
        reasoning, content, calls = choice.split(out["text"], done=bool(reason))
        logprobs = self.logprobs(plan, out, choice.tokens_sent)
        choice.tokens_sent = len(out["meta_info"].get("output_token_logprobs") or [])
        if content or reasoning or (logprobs is not None and logprobs.content):
            emit(DeltaMessage(content=content if content or not reasoning else None,
                              reasoning_content=reasoning or None), logprobs=logprobs)
        if calls:
            emit(DeltaMessage(tool_calls=delta_tool_calls(calls)))
        if reason and not choice.finished:
            choice.finished = True
            if choice.buffer is not None:
                reason = self.flush_tools(choice.buffer, emit) or reason
            emit(DeltaMessage(), finish_reason=reason, matched_stop=matched)
        return chunks

    @staticmethod
    def flush_tools(buffer: ToolStreamBuffer, emit: Any) -> Optional[str]:
        """Send what the buffer held (a buffer exists only with tools): the rest of the calls (returning
        "tool_calls" when the choice made any) or, when it was no call, content."""
        rest, calls = buffer.finish()
        if rest:
            emit(DeltaMessage(content=rest))
        if calls:
            emit(DeltaMessage(tool_calls=delta_tool_calls(calls)))
        return "tool_calls" if buffer.committed or calls else None


@dataclasses.dataclass
class _ChoiceStream:
    """One choice of a stream: how far its text and logprobs went, and its reasoning and tool-call splitters."""

    buffer: Optional[ToolStreamBuffer]
    reasoning: Optional[ChatReasoningStream]
    text_len: int = 0
    tokens_sent: int = 0
    finished: bool = False

    def split(self, text: str, done: bool) -> tuple[str, str, list[CallDelta]]:
        """The choice's cumulative text -> what is new of it as (reasoning, content, call deltas)."""
        reasoning, content, calls = "", text[self.text_len:], []
        self.text_len = len(text)
        if self.reasoning is not None:
            reasoning, content = self.reasoning.feed(content, done)
        if self.buffer is not None:
            content, calls = self.buffer.feed(content)
        return reasoning, content, calls


@dataclasses.dataclass
class _ChatStreamState:
    choices: dict[int, _ChoiceStream] = dataclasses.field(default_factory=dict)
    last: dict[int, dict] = dataclasses.field(default_factory=dict)
