"""Tool (function) calling for the OpenAI chat API: the parsers that find tool calls in a model's text
(`--tool-call-parser`), the JSON schemas that force calls for `tool_choice` "required" or a named function,
and the stream buffer that holds a call's text back from content and sends its arguments as they come."""

from radixlm.function_call.constrained import constrained_calls, tool_choice_schema
from radixlm.function_call.parsers import TOOL_CALL_PARSERS, ToolCallItem, ToolParser, get_tool_parser
from radixlm.function_call.qwen3_coder import Qwen3CoderParser  # registers qwen3_coder
from radixlm.function_call.stream_buffer import CallDelta, ToolStreamBuffer

__all__ = ["TOOL_CALL_PARSERS", "CallDelta", "Qwen3CoderParser", "ToolCallItem", "ToolParser", "ToolStreamBuffer", "constrained_calls",
           "get_tool_parser", "tool_choice_schema"]
