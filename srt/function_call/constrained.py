"""`tool_choice` "required" or a named function: a JSON schema the grammar backend forces the output into, and
the calls read back from that output. Independent of the model's own call format (no parser needed).

Named: the output is the function's arguments object. Required: the output is a JSON array of
`{"name": ..., "parameters": {...}}`, at least one (exactly one when `parallel_tool_calls` is false).
"""

from __future__ import annotations

import json
from typing import Mapping, Optional

from radixlm.function_call.parsers import ToolCallItem

ANY_OBJECT: dict = {"type": "object"}


def tool_choice_schema(functions: dict[str, Optional[dict]], name: Optional[str], parallel: bool) -> dict:
    """`functions`: tool name -> its parameters schema (None: any object). `name`: the named function, or None
    for "required"."""
    if name is not None:
        return functions[name] or ANY_OBJECT
    items = [{"type": "object", "properties": {"name": {"const": tool}, "parameters": params or ANY_OBJECT},
              "required": ["name", "parameters"], "additionalProperties": False}
             for tool, params in functions.items()]
    schema: dict = {"type": "array", "minItems": 1, "items": items[0] if len(items) == 1 else {"anyOf": items}}
    if not parallel:
        schema["maxItems"] = 1
    return schema


def constrained_calls(text: str, name: Optional[str], tools: Mapping[str, Optional[dict]]) -> list[ToolCallItem]:
    """The calls in a forced output; [] when it is not the forced form (cut short by max_tokens, say)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return []
    if name is not None:
        return [ToolCallItem(name, json.dumps(value, ensure_ascii=False))] if isinstance(value, dict) else []
    if not isinstance(value, list) or not value:
        return []
    calls = []
    for entry in value:
        if not isinstance(entry, dict) or entry.get("name") not in tools or not isinstance(
                entry.get("parameters"), dict):
            return []
        calls.append(ToolCallItem(entry["name"], json.dumps(entry["parameters"], ensure_ascii=False)))
    return calls
