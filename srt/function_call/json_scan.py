"""Reading tool calls out of JSON that is still being written, for streams that send arguments as they come.

`object_starts` finds where call objects begin at a nesting depth (0: bare objects, as Qwen2.5 and Llama 3 write
them; 1: the items of an array, as Mistral and the forced "required" form write them). `scan_call` reads one
call object as far as it goes: its name once the name's string is complete, and the span of its arguments
value (the end unknown while it is open). Text only grows, so a span's text so far is a prefix of its final
text: a stream can send it piece by piece and the pieces join into the model's own serialization.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class CallScan:
    name: Optional[str]  # the "name" value, once its string is complete
    args_start: Optional[int]  # where the arguments value begins
    args_end: Optional[int]  # just past it, once it is complete
    args_is_string: bool  # the arguments came serialized in a string: not streamed piece by piece
    end: Optional[int]  # just past the object's closing brace, once it is complete


def object_starts(text: str, depth: int) -> list[int]:
    """Offsets of the `{` that open objects at nesting `depth` (outside strings)."""
    starts, level, in_string, escaped = [], 0, False, False
    for i, ch in enumerate(text):
        if in_string:
            escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
            continue
        if ch == '"':
            in_string = True
        elif ch in "{[":
            if ch == "{" and level == depth:
                starts.append(i)
            level += 1
        elif ch in "}]":
            level -= 1
    return starts


def scan_call(text: str, start: int, args_keys: tuple[str, ...]) -> CallScan:
    """Read the object opening at `text[start]` (a `{`) as far as the text goes."""
    scanner = _ObjectScanner(text, args_keys)
    return scanner.run(start)


class _ObjectScanner:
    """A character walk with the object's own keys tracked at its top level (depth 1)."""

    def __init__(self, text: str, args_keys: tuple[str, ...]) -> None:
        self.text, self.args_keys = text, args_keys
        self.name: Optional[str] = None
        self.args_start: Optional[int] = None
        self.args_end: Optional[int] = None
        self.key: Optional[str] = None
        self.expect = "key"  # at depth 1: key, colon, value, then string / container / scalar, then comma
        self.value_start = 0

    def run(self, start: int) -> CallScan:
        depth, in_string, escaped, string_start = 0, False, False, 0
        end = None
        for i in range(start, len(self.text)):
            ch = self.text[i]
            if in_string:
                escaped, in_string = (False, True) if escaped else (ch == "\\", ch != '"')
                if not in_string and depth == 1:
                    self._string_ended(string_start, i + 1)
                continue
            if ch == '"':
                in_string, string_start = True, i
                if depth == 1 and self.expect == "value":
                    self._value_started(i, "string")
            elif ch in "{[":
                if depth == 1 and self.expect == "value":
                    self._value_started(i, "container")
                depth += 1
            elif ch in "}]":
                depth -= 1
                if depth == 1 and self.expect == "container":
                    self._value_ended(i + 1)
                elif depth == 0:
                    if self.expect == "scalar":
                        self._value_ended(i)
                    end = i + 1
                    break
            elif depth == 1:
                self._top_level_char(ch, i)
        args_is_string = self.args_start is not None and self.text[self.args_start] == '"'
        return CallScan(self.name, self.args_start, self.args_end, args_is_string, end)

    def _top_level_char(self, ch: str, i: int) -> None:
        if ch == ":" and self.expect == "colon":
            self.expect = "value"
        elif ch == ",":
            if self.expect == "scalar":
                self._value_ended(i)
            self.expect = "key"
        elif not ch.isspace() and self.expect == "value":
            self._value_started(i, "scalar")

    def _string_ended(self, start: int, end: int) -> None:
        if self.expect == "key":
            self.key = _decoded(self.text[start:end])
            self.expect = "colon"
        elif self.expect == "string":
            if self.key == "name":
                self.name = _decoded(self.text[start:end])
            self._value_ended(end)

    def _value_started(self, i: int, kind: str) -> None:
        self.expect, self.value_start = kind, i
        if self.key in self.args_keys and self.args_start is None:
            self.args_start = i

    def _value_ended(self, end: int) -> None:
        if self.key in self.args_keys and self.args_start == self.value_start:
            self.args_end = len(self.text[:end].rstrip())
        self.expect = "comma"


def _decoded(literal: str) -> Optional[str]:
    try:
        value = json.loads(literal)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None
