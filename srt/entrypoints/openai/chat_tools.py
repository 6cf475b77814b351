"""Tools on `/v1/chat/completions`: check `tools` / `tool_choice`, choose how calls are produced, and turn a
finished output into OpenAI tool calls.

`tool_choice`: "none" (the default without tools) leaves the tools out of the prompt and parses nothing;
"auto" (the default with tools) renders them through the chat template and parses the output with the server's
`--tool-call-parser`; "required" and a named function force the output into a JSON schema of the calls
(radixlm.function_call.constrained), which needs no parser.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Optional

from radixlm.constrained.grammar_request import validate_grammar_request
from radixlm.entrypoints.openai.protocol import (
    ChatCompletionRequest, ChatMessage, DeltaFunctionCall, DeltaToolCall, FunctionCall, ToolCall,
)
from radixlm.function_call import (
    TOOL_CALL_PARSERS, CallDelta, ToolCallItem, ToolParser, ToolStreamBuffer, get_tool_parser, tool_choice_schema,
)


class ToolRequestError(ValueError):
    """A 400 naming `param`."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ToolPlan:
    functions: dict[str, Optional[dict]]  # tool name -> its parameters schema
    template_tools: list[dict]  # the request's tools, as the chat template takes them
    parser: Optional[ToolParser]  # "auto"
    forced_name: Optional[str]  # named
    json_schema: Optional[str]  # the forced output's schema ("required" or named)

    def buffer(self, incremental: bool = False) -> ToolStreamBuffer:
        """`incremental`: a stream's buffer, which sends arguments as they come."""
        return ToolStreamBuffer(self.parser, self.functions, forced=self.json_schema is not None,
                                forced_name=self.forced_name, incremental=incremental)

    def split(self, text: str) -> tuple[Optional[str], list[ToolCallItem]]:
        """A finished output -> (content, calls)."""
        buffer = self.buffer()
        head, _ = buffer.feed(text)
        rest, deltas = buffer.finish()
        calls = [ToolCallItem(d.name or "", d.arguments) for d in deltas]  # whole calls: not incremental
        content = head + rest
        return (content if content.strip() else None) if calls else content, calls


def plan_tools(req: ChatCompletionRequest, parser_name: Optional[str], grammar_backend: str) -> Optional[ToolPlan]:
    """None when no tool is in play; raises ToolRequestError for a bad combination."""
    tools = req.tools or []
    choice = req.tool_choice
    if choice is not None and choice != "none" and not tools:
        raise ToolRequestError("tool_choice needs tools", "tool_choice")
    if not tools or choice == "none":
        return None
    functions: dict[str, Optional[dict]] = {}
    for tool in tools:
        if tool.function.name in functions:
            raise ToolRequestError(f"tools: the function name {tool.function.name!r} appears twice", "tools")
        functions[tool.function.name] = tool.function.parameters
    template_tools = [tool.model_dump(exclude_none=True) for tool in tools]
    if choice is None or choice == "auto":
        if parser_name is None:
            raise ToolRequestError(
                "tool_choice 'auto' (the default with tools) needs the server started with --tool-call-parser "
                f"(one of {', '.join(TOOL_CALL_PARSERS)}); 'required' or a named function work without one",
                "tool_choice")
        return ToolPlan(functions, template_tools, get_tool_parser(parser_name), None, None)
    name = None if choice == "required" else choice.function.name
    if name is not None and name not in functions:
        raise ToolRequestError(f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
    for param in ("response_format", "regex", "ebnf"):
        if getattr(req, param) is not None:
            raise ToolRequestError(f"{param} cannot be combined with tool_choice 'required' or a named "
                                   "function (both constrain the output)", param)
    schema = json.dumps(tool_choice_schema(functions, name, req.parallel_tool_calls))
    try:
        validate_grammar_request("json", schema, param="tools", backend=grammar_backend)
    except ValueError as exc:
        raise ToolRequestError(str(exc), "tools") from None
    return ToolPlan(functions, template_tools, None, name, schema)


def template_message(message: ChatMessage) -> dict[str, Any]:
    """A request message as the chat template takes it (tool calls with their arguments as objects)."""
    out: dict[str, Any] = {"role": "system" if message.role == "developer" else message.role,
                           "content": message.text()}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    if message.reasoning_content is not None:
        out["reasoning_content"] = message.reasoning_content
    if message.tool_calls:
        out["tool_calls"] = [{"id": call.id, "type": "function", "function": {
            "name": call.function.name, "arguments": _arguments_object(call.function.arguments)}}
            for call in message.tool_calls]
    return out


def _arguments_object(arguments: str) -> Any:
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return arguments
    return value if isinstance(value, dict) else arguments


def openai_tool_calls(calls: list[ToolCallItem]) -> list[ToolCall]:
    return [ToolCall(id=new_call_id(), function=FunctionCall(name=c.name, arguments=c.arguments)) for c in calls]


def delta_tool_calls(deltas: list[CallDelta]) -> list[DeltaToolCall]:
    """Stream pieces of calls: a call's first piece (it has the name) gets the call's id."""
    return [DeltaToolCall(index=d.index, id=new_call_id() if d.name else None, type="function" if d.name else None,
                          function=DeltaFunctionCall(name=d.name, arguments=d.arguments)) for d in deltas]


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"
