"""`qwen3_coder`: Qwen3-Coder's calls, XML-like tags around text values:

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

A value is the text between its tags (the newlines that frame it dropped), typed by the tool's parameters schema:
a string stays text even when it looks like a number; integer, number, boolean, object and array values are read
as JSON (or a Python literal, as the model sometimes writes them); without a schema, text that is valid JSON is
read as JSON. A last call cut off before its closing tags is still read. Streams send these calls whole.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Mapping, Optional

from radixlm.function_call.parsers import ToolCallItem, ToolParser, register_tool_parser

_CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)(?:</function>\s*(?:</tool_call>)?|$)", re.DOTALL)
_PARAM = re.compile(r"<parameter=([^>\n]+)>(.*?)(?:</parameter>|(?=<parameter=)|$)", re.DOTALL)


@register_tool_parser
class Qwen3CoderParser(ToolParser):
    name = "qwen3_coder"
    markers = ("<tool_call>",)

    def declared_calls(self, text: str, tools: Mapping[str, Optional[dict]]) -> list[ToolCallItem]:
        calls = self._raw_calls(text)
        if not calls or any(name not in tools for name, _ in calls):
            return []
        return [_item(name, params, tools[name]) for name, params in calls]

    def parse_calls(self, text: str) -> list[ToolCallItem]:
        return [_item(name, params, None) for name, params in self._raw_calls(text)]

    @staticmethod
    def _raw_calls(text: str) -> list[tuple[str, dict[str, str]]]:
        """[(name, {parameter: its text})] when `text` is calls and nothing else between them, else []."""
        calls, pos = [], 0
        for match in _CALL.finditer(text):
            if text[pos:match.start()].strip():
                return []
            body = match.group(2)
            params = {m.group(1).strip(): m.group(2).strip("\n") for m in _PARAM.finditer(body)}
            if _PARAM.sub("", body).strip():
                return []  # text in the function that is no parameter
            calls.append((match.group(1).strip(), params))
            pos = match.end()
        return calls if calls and not text[pos:].strip() else []


def _item(name: str, params: dict[str, str], schema: Optional[dict]) -> ToolCallItem:
    properties = (schema or {}).get("properties") or {}
    arguments = {key: _typed(value, properties.get(key)) for key, value in params.items()}
    return ToolCallItem(name, json.dumps(arguments, ensure_ascii=False))


def _typed(text: str, schema: Optional[dict]) -> Any:
    kind = (schema or {}).get("type")
    if kind == "string" or (isinstance(kind, list) and "string" in kind and len(kind) == 1):
        return text
    if kind == "boolean" and text.strip().lower() in ("true", "false"):
        return text.strip().lower() == "true"
    value = _literal(text.strip())
    if kind is None:
        return text if value is None or isinstance(value, str) else value
    return text if value is None else value


def _literal(text: str) -> Any:
    """JSON, else a Python literal, else None."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
