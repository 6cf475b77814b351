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


class StartFinder:
    """Finds, as text arrives, where call objects open at nesting `depth` (outside strings). `next_start` walks
    only the characters it has not seen; after a call object closes, `resume_after` jumps past it (its depth is
    the call depth again), so no character is walked twice."""

    def __init__(self, depth: int) -> None:
        self.depth, self.pos, self.level = depth, 0, 0
        self.in_string = self.escaped = False

    def next_start(self, text: str) -> Optional[int]:
        for i in range(self.pos, len(text)):
            ch = text[i]
            if self.in_string:
                self.escaped, self.in_string = (False, True) if self.escaped else (ch == "\\", ch != '"')
            elif ch == '"':
                self.in_string = True
            elif ch == "{" and self.level == self.depth:
                self.pos = i  # paused on the start until resume_after
                return i
            elif ch in "{[":
                self.level += 1
            elif ch in "}]":
                self.level -= 1
        self.pos = len(text)
        return None

    def resume_after(self, end: int) -> None:
        self.pos, self.level = end, self.depth


def object_starts(text: str, depth: int) -> list[int]:
    """Offsets of the `{` that open objects at nesting `depth` (outside strings)."""
    finder, starts = StartFinder(depth), []
    while (start := finder.next_start(text)) is not None:
        starts.append(start)
        end = scan_call(text, start, ()).end
        if end is None:
            break
        finder.resume_after(end)
    return starts


def scan_call(text: str, start: int, args_keys: tuple[str, ...]) -> CallScan:
    """Read the object opening at `text[start]` (a `{`) as far as the text goes."""
    return CallScanner(start, args_keys).advance(text)


class CallScanner:
    """One call object read as text arrives: `advance(text)` walks only the characters not seen yet, tracking
    the object's own keys at its top level (depth 1)."""

    def __init__(self, start: int, args_keys: tuple[str, ...]) -> None:
        self.start, self.args_keys = start, args_keys
        self.pos, self.depth, self.in_string, self.escaped, self.string_start = start, 0, False, False, 0
        self.name: Optional[str] = None
        self.args_start: Optional[int] = None
        self.args_end: Optional[int] = None
        self.end: Optional[int] = None
        self.key: Optional[str] = None
        self.expect = "key"  # at depth 1: key, colon, value, then string / container / scalar, then comma
        self.value_start = 0
        self.text = ""

    def advance(self, text: str) -> CallScan:
        self.text = text
        while self.end is None and self.pos < len(text):
            self._step(text[self.pos], self.pos)
            self.pos += 1
        args_is_string = self.args_start is not None and text[self.args_start] == '"'
        return CallScan(self.name, self.args_start, self.args_end, args_is_string, self.end)

    def _step(self, ch: str, i: int) -> None:
        if self.in_string:
            self.escaped, self.in_string = (False, True) if self.escaped else (ch == "\\", ch != '"')
            if not self.in_string and self.depth == 1:
                self._string_ended(self.string_start, i + 1)
        elif ch == '"':
            self.in_string, self.string_start = True, i
            if self.depth == 1 and self.expect == "value":
                self._value_started(i, "string")
        elif ch in "{[":
            if self.depth == 1 and self.expect == "value":
                self._value_started(i, "container")
            self.depth += 1
        elif ch in "}]":
            self.depth -= 1
            if self.depth == 1 and self.expect == "container":
                self._value_ended(i + 1)
            elif self.depth == 0:
                if self.expect == "scalar":
                    self._value_ended(i)
                self.end = i + 1
        elif self.depth == 1:
            self._top_level_char(ch, i)

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
            self.args_end = self.value_start + len(self.text[self.value_start:end].rstrip())
        self.expect = "comma"


def _decoded(literal: str) -> Optional[str]:
    try:
        value = json.loads(literal)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None
