"""Reasoning on `/v1/chat/completions`: with `--reasoning-parser`, a reasoning model's thinking goes to
`reasoning_content` and the answer to `content` (radixlm.reasoning_parser finds the block).

`separate_reasoning: false` leaves the text whole in `content`; `stream_reasoning: false` makes a stream hold the
reasoning and send it in one delta when the block closes (or the output ends). A constrained request
(`response_format`, `regex`, `ebnf`, a forced tool call) whose output starts inside the block thinks freely first:
it is sent with `require_reasoning`, and the scheduler applies the constraint from the block's end
(radixlm.constrained.reasoner).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from radixlm.entrypoints.openai.protocol import ChatCompletionRequest
from radixlm.reasoning_parser import (
    ReasoningFormat, ReasoningStream, continues_in_reasoning, get_reasoning_format, separate, starts_in_reasoning,
)


@dataclass(frozen=True)
class ReasoningPlan:
    fmt: ReasoningFormat
    in_reasoning: bool  # the output begins inside the block
    stream_reasoning: bool

    def split(self, text: str) -> tuple[Optional[str], str]:
        """A finished output -> (reasoning_content, content)."""
        return separate(text, self.fmt, self.in_reasoning)

    def stream(self) -> "ChatReasoningStream":
        return ChatReasoningStream(ReasoningStream(self.fmt, self.in_reasoning), self.stream_reasoning)


def output_thinks_first(req: ChatCompletionRequest, parser_name: Optional[str], prompt: str) -> bool:
    """Whether the output starts inside a thinking block (False without a parser): read from the rendered
    `prompt`'s end, or, with `continue_final_message`, from the assistant turn being continued."""
    if parser_name is None:
        return False
    fmt = get_reasoning_format(parser_name)
    if req.continue_final_message:
        return continues_in_reasoning(fmt, req.messages[-1].text())
    return starts_in_reasoning(fmt, prompt)


def plan_reasoning(req: ChatCompletionRequest, parser_name: Optional[str],
                   thinks_first: bool) -> Optional[ReasoningPlan]:
    """None when nothing is separated (no parser on the server, or `separate_reasoning: false`);
    `thinks_first`: output_thinks_first's answer."""
    if parser_name is None or not req.separate_reasoning:
        return None
    return ReasoningPlan(get_reasoning_format(parser_name), thinks_first, req.stream_reasoning)


@dataclass
class ChatReasoningStream:
    """One choice's stream: text pieces in, (reasoning, content) deltas out."""

    stream: ReasoningStream
    stream_reasoning: bool
    _held: list[str] = field(default_factory=list)  # the reasoning kept back when not streamed

    def feed(self, text: str, done: bool) -> tuple[str, str]:
        reasoning, content = self.stream.feed(text)
        if done:
            tail_reasoning, tail_content = self.stream.finish()
            reasoning, content = reasoning + tail_reasoning, content + tail_content
        if self.stream_reasoning:
            return reasoning, content
        self._held.append(reasoning)
        if not done and self.stream.state == "reasoning":
            return "", content
        whole = "".join(self._held)
        self._held.clear()
        return whole, content
