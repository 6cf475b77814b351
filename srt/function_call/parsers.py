"""Tool-call parsers, one per model family's output format, in a registry keyed by `--tool-call-parser`.

`qwen25`: Qwen2.5 / Hermes, each call a JSON object `{"name": ..., "arguments": {...}}` between `<tool_call>` and
`</tool_call>` (a last call may lack the closing tag when generation stopped there). `llama3`: Llama 3.1/3.2, the
output (optionally after `<|python_tag|>`) is one or more JSON objects `{"name": ..., "parameters": {...}}`
separated by `;`. `mistral`: `[TOOL_CALLS]` then a JSON array of `{"name": ..., "arguments": {...}}`.
`pythonic`: a Python list of calls with keyword arguments. `qwen3_coder` (its own module): XML-like tags. A parse
either finds calls that all name a declared tool, or leaves the text as content.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import ClassVar, Mapping, Optional


@dataclass(frozen=True)
class ToolCallItem:
    name: str
    arguments: str  # a JSON object, serialized


@dataclass(frozen=True)
class ParseResult:
    content: Optional[str]  # the text outside the calls (None when empty)
    calls: list[ToolCallItem]


class ToolParser:
    """Finds tool calls in a completed output. `markers` start a call anywhere in the text; `start_markers` only
    at the start of the output (after whitespace); the stream buffer holds text back from the first of either."""

    name: ClassVar[str] = ""
    markers: ClassVar[tuple[str, ...]] = ()
    start_markers: ClassVar[tuple[str, ...]] = ()
    # JSON formats: the keys that may hold a call's arguments (first found wins), and the nesting depth of the
    # call objects, for streams that send arguments as they come (json_scan; None: calls are sent whole at the end)
    args_keys: ClassVar[tuple[str, ...]] = ()
    call_depth: ClassVar[Optional[int]] = None

    def parse(self, text: str, tools: Mapping[str, Optional[dict]]) -> ParseResult:
        """`tools`: the declared tools, name -> parameters schema."""
        start = self.call_start(text)
        calls = [] if start is None else self.declared_calls(text[start:], tools)
        if start is None or not calls:
            return ParseResult(text or None, [])
        head = text[:start]
        return ParseResult(head if head.strip() else None, calls)

    def declared_calls(self, text: str, tools: Mapping[str, Optional[dict]]) -> list[ToolCallItem]:
        """The calls in `text` (from the first call on) if every one names a declared tool, else []."""
        calls = self.parse_calls(text)
        return calls if all(c.name in tools for c in calls) else []

    def call_start(self, text: str) -> Optional[int]:
        """Where the first call starts, or None."""
        found = [i for i in (text.find(m) for m in self.markers) if i >= 0]
        stripped = len(text) - len(text.lstrip())
        if any(text.startswith(m, stripped) for m in self.start_markers):
            found.append(stripped)
        return min(found) if found else None

    def parse_calls(self, text: str) -> list[ToolCallItem]:
        """The calls in `text` (which starts at the first call); [] when any is malformed."""
        raise NotImplementedError


TOOL_CALL_PARSERS: dict[str, type[ToolParser]] = {}  # filled by register_tool_parser (qwen3_coder.py too)


def register_tool_parser(cls: type[ToolParser]) -> type[ToolParser]:
    TOOL_CALL_PARSERS[cls.name] = cls
    return cls


def _call_item(obj: object, args_keys: tuple[str, ...]) -> Optional[ToolCallItem]:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = next((obj[k] for k in args_keys if k in obj), {})
    if isinstance(args, str):  # some models emit the arguments already serialized
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCallItem(obj["name"], json.dumps(args, ensure_ascii=False))


@register_tool_parser
class Qwen25Parser(ToolParser):
    name = "qwen25"
    markers = ("<tool_call>",)
    call_depth = 0
    args_keys = ("arguments", "parameters")
    _BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)

    def parse_calls(self, text: str) -> list[ToolCallItem]:
        calls = []
        for body in self._BLOCK.findall(text):
            try:
                item = _call_item(json.loads(body), self.args_keys)
            except json.JSONDecodeError:
                return []
            if item is None:
                return []
            calls.append(item)
        return calls


@register_tool_parser
class Llama3Parser(ToolParser):
    """`<|python_tag|>` is a special token, so with `skip_special_tokens` the text may start at the JSON."""

    name = "llama3"
    markers = ("<|python_tag|>",)
    start_markers = ("{",)
    call_depth = 0
    args_keys = ("parameters", "arguments")

    def parse_calls(self, text: str) -> list[ToolCallItem]:
        rest = text.replace("<|python_tag|>", "").strip()
        decoder = json.JSONDecoder()
        calls = []
        while rest:
            try:
                obj, end = decoder.raw_decode(rest)
            except json.JSONDecodeError:
                return []
            item = _call_item(obj, self.args_keys)
            if item is None:
                return []
            calls.append(item)
            rest = rest[end:].strip()
            if rest.startswith(";"):
                rest = rest[1:].strip()
            elif rest:
                return []  # text after a call that is not another call
        return calls


@register_tool_parser
class MistralParser(ToolParser):
    """`[TOOL_CALLS]` is a special token, so with `skip_special_tokens` the text may hold the array alone."""

    name = "mistral"
    markers = ("[TOOL_CALLS]",)
    start_markers = ("[",)
    call_depth = 1
    args_keys = ("arguments", "parameters")

    def parse_calls(self, text: str) -> list[ToolCallItem]:
        body = text.replace("[TOOL_CALLS]", "", 1).strip()
        try:
            value, end = json.JSONDecoder().raw_decode(body)
        except json.JSONDecodeError:
            return []
        entries = value if isinstance(value, list) else [value]
        calls = [_call_item(entry, self.args_keys) for entry in entries]
        if not calls or body[end:].strip() or any(c is None for c in calls):
            return []
        return [c for c in calls if c is not None]


@register_tool_parser
class PythonicParser(ToolParser):
    """Llama 3.2 / Llama 4's pythonic form: `[get_weather(city="Paris"), get_time()]`, keyword arguments with
    literal values, optionally between `<|python_start|>` and `<|python_end|>`."""

    name = "pythonic"
    markers = ("<|python_start|>",)
    start_markers = ("[",)

    def parse_calls(self, text: str) -> list[ToolCallItem]:
        body = text.replace("<|python_start|>", "").replace("<|python_end|>", "").strip()
        try:
            tree = ast.parse(body, mode="eval").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return []
        if not isinstance(tree, ast.List) or not tree.elts:
            return []
        calls = []
        for node in tree.elts:
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
                return []
            try:
                arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg is not None}
            except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
                return []
            if len(arguments) != len(node.keywords):
                return []
            calls.append(ToolCallItem(node.func.id, json.dumps(arguments, ensure_ascii=False)))
        return calls


def get_tool_parser(name: Optional[str]) -> Optional[ToolParser]:
    if name is None:
        return None
    if name not in TOOL_CALL_PARSERS:
        raise ValueError(f"--tool-call-parser must be one of {tuple(TOOL_CALL_PARSERS)}, got {name!r}")
    return TOOL_CALL_PARSERS[name]()
