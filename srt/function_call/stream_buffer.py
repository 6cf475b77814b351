"""Streaming with tools: content goes out as it comes until a call may have started; from there the text is held
and parsed when the choice finishes, then sent as whole tool calls (or, when it was no call, as content)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from radixlm.function_call.constrained import constrained_calls
from radixlm.function_call.parsers import ToolCallItem, ToolParser


@dataclass
class ToolStreamBuffer:
    parser: Optional[ToolParser]  # "auto": the server's --tool-call-parser
    forced: bool = False  # "required" / named: the whole output is the forced JSON
    forced_name: Optional[str] = None
    text: str = ""
    sent: int = 0  # characters of `text` already sent as content
    holding: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.holding = self.forced

    def feed(self, delta: str) -> str:
        """Add new text; return the content that can be sent now."""
        self.text += delta
        if self.holding:
            return ""
        if self.parser is None:
            return self._send_to(len(self.text))
        start = self.parser.call_start(self.text)
        if start is not None:
            self.holding = True
            return self._send_to(start)
        return self._send_to(len(self.text) - self._held_tail())

    def finish(self, tool_names: set[str]) -> tuple[str, list[ToolCallItem]]:
        """(the content not sent yet, the calls) once the choice has finished."""
        rest = self.text[self.sent:]
        if self.forced:
            calls = constrained_calls(rest, self.forced_name, tool_names)
        elif self.holding and self.parser is not None:
            calls = self.parser.declared_calls(rest, tool_names)
        else:
            calls = []
        self.sent = len(self.text)
        return ("", calls) if calls else (rest, [])

    def _send_to(self, end: int) -> str:
        out = self.text[self.sent:end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out

    def _held_tail(self) -> int:
        """Characters at the end that may begin a marker (sent once they cannot)."""
        assert self.parser is not None
        if self.parser.start_markers and not self.text.strip():
            return len(self.text) - self.sent  # nothing but whitespace yet: a call may still start the output
        longest = 0
        for marker in self.parser.markers:
            for n in range(min(len(marker) - 1, len(self.text)), 0, -1):
                if self.text.endswith(marker[:n]):
                    longest = max(longest, n)
                    break
        return longest
