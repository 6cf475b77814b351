"""Streaming with tools: content goes out as it comes until a call may have started; from there the text is held.

With `incremental` (streams), a call is announced once its name is complete and names a declared tool (forced
named calls at once), and its arguments follow piece by piece as the model writes them (json_scan): the pieces
join into the model's own serialization of the arguments. Formats that are not JSON (pythonic), arguments sent
as a string, and calls the scan cannot place are sent whole when the choice finishes, from the full parse.
Without `incremental` (whole responses), every call comes from the full parse, its arguments re-serialized.
Once a call has been announced the choice is committed to tool calls, even if the full parse then fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

from radixlm.function_call.constrained import constrained_calls
from radixlm.function_call.json_scan import CallScan, CallScanner, StartFinder
from radixlm.function_call.parsers import ToolCallItem, ToolParser

REQUIRED_ARGS_KEYS = ("parameters",)  # the forced "required" form: [{"name": ..., "parameters": {...}}, ...]


@dataclass(frozen=True)
class CallDelta:
    index: int  # the call's position in the choice's calls
    name: Optional[str]  # set on a call's first delta
    arguments: str


@dataclass
class ToolStreamBuffer:
    parser: Optional[ToolParser]  # "auto": the server's --tool-call-parser
    tools: Mapping[str, Optional[dict]] = field(default_factory=dict)  # declared: name -> parameters schema
    forced: bool = False  # "required" / named: the whole output is the forced JSON
    forced_name: Optional[str] = None
    incremental: bool = False
    text: str = ""
    sent: int = 0  # characters of `text` already sent as content
    holding: bool = field(default=False, init=False)
    region: int = field(default=0, init=False)  # where the held calls begin
    streamed: list[int] = field(default_factory=list, init=False)  # per announced call: argument chars sent
    stalled: bool = field(default=False, init=False)  # no further call is announced before the end
    _finder: Optional[StartFinder] = field(default=None, init=False)  # where the next call object opens
    _open: Optional[CallScanner] = field(default=None, init=False)  # the call object being read
    _open_announced: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.holding = self.forced

    @property
    def committed(self) -> bool:
        return bool(self.streamed)

    def feed(self, delta: str) -> tuple[str, list[CallDelta]]:
        """Add new text; return the content that can be sent now and the call deltas."""
        self.text += delta
        content = "" if self.holding else self._content()
        return content, self._advance() if self.holding and self.incremental else []

    def finish(self) -> tuple[str, list[CallDelta]]:
        """(the content not sent yet, the remaining call deltas) once the choice has finished."""
        deltas = self._advance() if self.holding and self.incremental else []
        rest = self.text[self.sent:]
        self.sent = len(self.text)
        calls = self._parsed(rest)
        if not self.committed and not calls:
            return rest, []
        first = len(self.streamed)
        deltas += [CallDelta(first + i, c.name, c.arguments) for i, c in enumerate(calls[first:])]
        return "", deltas

    # ---- content before the calls -------------------------------------------------------

    def _content(self) -> str:
        if self.parser is None:
            return self._send_to(len(self.text))
        start = self.parser.call_start(self.text)
        if start is not None:
            self.holding, self.region = True, start
            return self._send_to(start)
        return self._send_to(len(self.text) - self._held_tail())

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

    # ---- the calls ---------------------------------------------------------------------------

    def _parsed(self, rest: str) -> list[ToolCallItem]:
        if self.forced:
            return constrained_calls(rest, self.forced_name, self.tools)
        if self.holding and self.parser is not None:
            return self.parser.declared_calls(rest, self.tools)
        return []

    def _call_format(self) -> Optional[tuple[int, tuple[str, ...]]]:
        """(the call objects' nesting depth, their arguments' keys), or None when calls are not streamed."""
        if self.forced_name is not None:
            return 0, ()  # the whole output is the arguments object
        if self.forced:
            return 1, REQUIRED_ARGS_KEYS
        if self.parser is not None and self.parser.call_depth is not None:
            return self.parser.call_depth, self.parser.args_keys
        return None

    def _next_scan(self, region: str) -> Optional[CallScan]:
        """The open call read as far as the text goes (a new one once the last closed), or None."""
        if self._open is None:
            form = self._call_format()
            if form is None or (self.forced_name is not None and self.streamed):
                return None
            if self._finder is None:
                self._finder = StartFinder(form[0])
            start = self._finder.next_start(region)
            if start is None:
                return None
            self._open, self._open_announced = CallScanner(start, form[1]), False
        scan = self._open.advance(region)
        if self.forced_name is not None:
            scan = CallScan(self.forced_name, self._open.start, scan.end, False, scan.end)
        return scan

    def _advance(self) -> list[CallDelta]:
        """Announce the calls that can be, and send the arguments written since the last call."""
        region = self.text[self.region:]
        out: list[CallDelta] = []
        while not self.stalled and (scan := self._next_scan(region)) is not None:
            if not self._open_announced:
                if not self._announce(scan):
                    break
                self._open_announced = True
                out.append(CallDelta(len(self.streamed) - 1, scan.name, ""))
            index = len(self.streamed) - 1
            stop = scan.args_end if scan.args_end is not None else len(region)
            piece = region[scan.args_start + self.streamed[index]:stop]
            if piece:
                out.append(CallDelta(index, None, piece))
                self.streamed[index] += len(piece)
            if scan.end is None:
                break
            self._finder.resume_after(scan.end)
            self._open = None
        return _merged(out)

    def _announce(self, scan: CallScan) -> bool:
        """Whether the call can go out now; a call that never will stalls the announcements."""
        if scan.name is None or scan.args_start is None:  # the arguments' first character says if they stream
            return False
        if scan.name not in self.tools or scan.args_is_string:
            self.stalled = True
            return False
        self.streamed.append(0)
        return True


def _merged(deltas: list[CallDelta]) -> list[CallDelta]:
    """A call's name and the arguments that came with it in one delta."""
    out: list[CallDelta] = []
    for delta in deltas:
        if out and out[-1].index == delta.index and delta.name is None:
            out[-1] = CallDelta(delta.index, out[-1].name, out[-1].arguments + delta.arguments)
        else:
            out.append(delta)
    return out
