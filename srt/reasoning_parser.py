"""Reasoning (chain-of-thought) separated from the answer, keyed by `--reasoning-parser`.

A reasoning model writes its thinking in a block (`<think>...</think>`; Kimi `◁think▷...◁/think▷`) before the
answer. Where the output starts inside the block is read from the rendered prompt: a template that opened the
block (`...<think>\\n`, DeepSeek-R1, Qwen3-Thinking, DeepSeek-V3.1 with `thinking`) starts the output in it, one
that closed an empty block (Qwen3 with `enable_thinking: false`) starts it in the answer, and otherwise the
output opens the block itself or not at all. `always` formats (deepseek-r1, qwen3-thinking) start in the block
unless the prompt closed it, for the models whose templates open it without saying so. An output that never
closes its block is all reasoning (it stopped while thinking).

`ReasoningStream` splits text fed piece by piece (a tag may arrive split across pieces) and gives, for any
division of the text, the same concatenation as `separate` gives for the whole.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class ReasoningFormat:
    name: str
    start: str
    end: str
    always: bool  # the model thinks whether or not the prompt opened the block


REASONING_PARSERS: dict[str, ReasoningFormat] = {f.name: f for f in (
    ReasoningFormat("deepseek-r1", "<think>", "</think>", always=True),
    ReasoningFormat("deepseek-v3", "<think>", "</think>", always=False),
    ReasoningFormat("qwen3", "<think>", "</think>", always=False),
    ReasoningFormat("qwen3-thinking", "<think>", "</think>", always=True),
    ReasoningFormat("kimi", "\u25c1think\u25b7", "\u25c1/think\u25b7", always=False),
)}


def get_reasoning_format(name: str) -> ReasoningFormat:
    if name not in REASONING_PARSERS:
        raise ValueError(f"--reasoning-parser must be one of {tuple(REASONING_PARSERS)}, got {name!r}")
    return REASONING_PARSERS[name]


def starts_in_reasoning(fmt: ReasoningFormat, prompt: str) -> bool:
    """Whether the output of `prompt` (the rendered chat) begins inside the reasoning block."""
    tail = prompt.rstrip()
    if tail.endswith(fmt.end):
        return False
    return fmt.always or tail.endswith(fmt.start)


def continues_in_reasoning(fmt: ReasoningFormat, partial: str) -> bool:
    """Whether an output continuing `partial` (an assistant turn written so far) is inside the block: one was
    opened and not closed, or, for `always` formats, none was closed yet."""
    opened, closed = partial.rfind(fmt.start), partial.rfind(fmt.end)
    if opened > closed:
        return True
    return closed < 0 and fmt.always


@dataclass
class ReasoningStream:
    """Text in, (reasoning, content) pieces out. States: "detect" (the output may still open a block),
    "reasoning", "after" (the block closed; whitespace before the answer is dropped), "content"."""

    fmt: ReasoningFormat
    in_reasoning: bool
    state: str = ""
    opening: bool = True  # in "reasoning" before any text: a leading start tag is dropped
    held: str = ""
    found: bool = False  # a reasoning block was seen (or the output began in one)
    _reasoning: list[str] = field(default_factory=list)
    _content: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.state = "reasoning" if self.in_reasoning else "detect"
        self.found = self.in_reasoning

    def feed(self, text: str) -> tuple[str, str]:
        self.held += text
        while self.held and getattr(self, f"_step_{self.state}")():
            pass
        return self._take()

    def finish(self) -> tuple[str, str]:
        """The held text (a partial tag, trailing whitespace) goes where the state says."""
        if self.state == "reasoning":
            self._reasoning.append(self.held)
        elif self.state in ("detect", "content"):
            self._content.append(self.held)
        self.held = ""
        return self._take()

    def _take(self) -> tuple[str, str]:
        out = "".join(self._reasoning), "".join(self._content)
        self._reasoning.clear()
        self._content.clear()
        return out

    # each step consumes what it can and returns whether the loop should go on (False: wait for more text)

    def _step_detect(self) -> bool:
        opened = self._leading_tag()
        if opened is None:
            return False
        self.state = "reasoning" if opened else "content"
        self.found = self.found or opened
        self.opening = False
        return True

    def _step_reasoning(self) -> bool:
        if self.opening:
            if self._leading_tag() is None:
                return False
            self.opening = False
        end = self.held.find(self.fmt.end)
        if end >= 0:
            self._reasoning.append(self.held[:end])
            self.held = self.held[end + len(self.fmt.end):]
            self.state = "after"
            return True
        keep = _partial_suffix(self.held, self.fmt.end)
        self._reasoning.append(self.held[:len(self.held) - keep])
        self.held = self.held[len(self.held) - keep:]
        return False

    def _step_after(self) -> bool:
        stripped = self.held.lstrip()
        self.held = stripped
        if stripped:
            self.state = "content"
        return bool(stripped)

    def _step_content(self) -> bool:
        self._content.append(self.held)
        self.held = ""
        return False

    def _leading_tag(self) -> Optional[bool]:
        """Does the held text open with the start tag (consumed, with the whitespace before it)? None: can't
        tell yet (only whitespace, or a prefix of the tag)."""
        stripped = self.held.lstrip()
        start = self.fmt.start
        if stripped.startswith(start):
            self.held = stripped[len(start):]
            return True
        if not stripped or start.startswith(stripped):
            return None
        return False


def _partial_suffix(text: str, tag: str) -> int:
    """The length of the longest end of `text` that begins `tag` (held back: the tag may be arriving)."""
    for size in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0


def separate(text: str, fmt: ReasoningFormat, in_reasoning: bool) -> tuple[Optional[str], str]:
    """A whole output -> (reasoning, content); reasoning is None when the output had no reasoning block."""
    stream = ReasoningStream(fmt, in_reasoning)
    reasoning, content = stream.feed(text)
    tail_reasoning, tail_content = stream.finish()
    if not stream.found:
        return None, text
    return (reasoning + tail_reasoning).strip(), content + tail_content
