"""Pydantic models of the OpenAI-compatible API (requests, responses, stream chunks, errors).

Requests ignore fields they do not know (clients send many optional ones); every field that
changes the output is declared here and either used or rejected with a 400 by the serving layer.
"""

from __future__ import annotations

import time
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

Prompt = Union[str, list[str], list[int], list[list[int]]]


class ErrorResponse(BaseModel):
    object: str = "error"
    message: str
    type: str
    param: Optional[str] = None
    code: int


class StreamOptions(BaseModel):
    include_usage: bool = False
    continuous_usage_stats: bool = False  # with include_usage: every chunk carries its choice's usage so far


class PromptTokensDetails(BaseModel):
    cached_tokens: int = 0


class UsageInfo(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: Optional[PromptTokensDetails] = None


class SamplingFields(BaseModel):
    """Fields shared by completions and chat; names follow OpenAI plus SGLang's extensions."""

    model_config = ConfigDict(extra="ignore")

    model: str
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    n: int = 1
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None
    seed: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_tokens: int = 0
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    user: Optional[str] = None
    cache_salt: Optional[str] = None
    rid: Optional[str] = None
    # text | json_object | json_schema {name, schema, strict}: maps onto the native json_schema
    response_format: Optional[Any] = None
    regex: Optional[str] = None  # SGLang's extensions: the output matches this regular expression
    ebnf: Optional[str] = None  # ... or this EBNF grammar (one constraint per request)
    # token id (a JSON key) -> bias in [-100, 100]
    logit_bias: Optional[dict[str, float]] = None


class CompletionRequest(SamplingFields):
    prompt: Prompt
    max_tokens: Optional[int] = 16
    logprobs: Optional[int] = None
    echo: bool = False
    best_of: Optional[int] = None
    suffix: Optional[str] = None


class TextContentPart(BaseModel):
    type: Literal["text"]
    text: str


class FunctionCall(BaseModel):
    name: str
    arguments: str  # a JSON object, serialized (as OpenAI sends and expects it)


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class FunctionDefinition(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None  # a JSON schema; None: any object
    strict: Optional[bool] = None


class Tool(BaseModel):
    type: Literal["function"]
    function: FunctionDefinition


class NamedToolChoiceFunction(BaseModel):
    name: str


class NamedToolChoice(BaseModel):
    type: Literal["function"]
    function: NamedToolChoiceFunction


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Optional[Union[str, list[TextContentPart]]] = None
    name: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None  # an assistant turn that called tools
    tool_call_id: Optional[str] = None  # a tool turn: the call it answers
    reasoning_content: Optional[str] = None  # an assistant turn's reasoning, for templates that render it

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts_only(cls, value: Any) -> Any:
        """Name the part a text-only model cannot take (an image, audio, a file) instead of a type error."""
        for part in value if isinstance(value, list) else ():
            kind = part.get("type") if isinstance(part, dict) else None
            if kind is not None and kind != "text":
                raise ValueError(f"content parts of type {kind!r} are not supported; only 'text' parts are")
        return value

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content)


class ChatCompletionRequest(SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = None
    max_completion_tokens: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = None
    continue_final_message: bool = False
    tools: Optional[list[Tool]] = None
    tool_choice: Optional[Union[Literal["none", "auto", "required"], NamedToolChoice]] = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: Optional[dict[str, Any]] = None  # extra variables for the chat template
    separate_reasoning: bool = True  # with --reasoning-parser: reasoning goes to reasoning_content
    stream_reasoning: bool = True  # False: a stream sends the reasoning in one delta when it ends


# ---- completions responses ----------------------------------------------------------


class CompletionLogprobs(BaseModel):
    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[Optional[float]] = Field(default_factory=list)
    top_logprobs: list[Optional[dict[str, float]]] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: Optional[CompletionLogprobs] = None
    finish_reason: Optional[str] = None
    matched_stop: Optional[Union[int, str]] = None


class CompletionResponse(BaseModel):
    id: str
    object: str = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Optional[UsageInfo] = None


class CompletionStreamResponse(CompletionResponse):
    pass


# ---- chat responses -----------------------------------------------------------------


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: Optional[list[int]] = None


class ChatTokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChoiceLogprobs(BaseModel):
    content: list[ChatTokenLogprob] = Field(default_factory=list)


class ChatResponseMessage(BaseModel):
    role: str = "assistant"
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None


class ChatCompletionChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: Optional[ChoiceLogprobs] = None
    finish_reason: Optional[str] = None
    matched_stop: Optional[Union[int, str]] = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: str = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatCompletionChoice]
    usage: Optional[UsageInfo] = None


class DeltaFunctionCall(BaseModel):
    name: Optional[str] = None  # on a call's first delta
    arguments: str = ""  # the next piece of the serialized arguments

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict:
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaToolCall(BaseModel):
    """A piece of a streamed call: the first carries its id, type and name; the rest more of its arguments."""

    index: int  # the call's position in the choice's list of calls
    id: Optional[str] = None
    type: Optional[Literal["function"]] = None
    function: DeltaFunctionCall

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict:
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaMessage(BaseModel):
    """A stream delta carries only the keys it sets (`role`, `content`, `reasoning_content`, `tool_calls`; or
    none: `{}`)."""

    role: Optional[str] = None
    content: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[DeltaToolCall]] = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: Any) -> dict:
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatStreamChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: Optional[ChoiceLogprobs] = None
    finish_reason: Optional[str] = None
    matched_stop: Optional[Union[int, str]] = None


class ChatCompletionStreamResponse(BaseModel):
    id: str
    object: str = "chat.completion.chunk"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatStreamChoice]
    usage: Optional[UsageInfo] = None


# ---- models, tokenize ---------------------------------------------------------------


class ModelCard(BaseModel):
    id: str
    object: str = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "radixlm"
    root: Optional[str] = None
    max_model_len: Optional[int] = None


class ModelList(BaseModel):
    object: str = "list"
    data: list[ModelCard] = Field(default_factory=list)


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    prompt: Union[str, list[str]]
    add_special_tokens: bool = True


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    tokens: Union[list[int], list[list[int]]]
