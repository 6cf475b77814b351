"""reasoning_parser: where the output starts, the split of whole outputs, and streams cut at every point."""

from __future__ import annotations

import pytest

from radixlm.reasoning_parser import (
    REASONING_PARSERS, ReasoningStream, continues_in_reasoning, get_reasoning_format, separate, starts_in_reasoning,
)

QWEN3 = REASONING_PARSERS["qwen3"]
R1 = REASONING_PARSERS["deepseek-r1"]
KIMI = REASONING_PARSERS["kimi"]


def test_the_prompt_decides_where_the_output_starts() -> None:
    assert not starts_in_reasoning(QWEN3, "<|im_start|>assistant\n")  # the model may open a block itself
    assert starts_in_reasoning(QWEN3, "<|im_start|>assistant\n<think>\n")  # the template opened it
    assert not starts_in_reasoning(QWEN3, "<|im_start|>assistant\n<think>\n\n</think>\n\n")  # thinking off
    assert starts_in_reasoning(R1, "<｜Assistant｜>")  # always thinks
    assert not starts_in_reasoning(R1, "<｜Assistant｜><think>\n\n</think>\n\n")


@pytest.mark.parametrize("text, in_reasoning, want", [
    ("<think>\nA plan.\n</think>\n\nThe answer.", False, ("A plan.", "The answer.")),
    ("  <think>x</think>y", False, ("x", "y")),
    ("No block here.", False, (None, "No block here.")),
    ("An answer that mentions <think> later.", False, (None, "An answer that mentions <think> later.")),
    ("A plan.\n</think>\n\nThe answer.", True, ("A plan.", "The answer.")),
    ("<think>A plan.</think>The answer.", True, ("A plan.", "The answer.")),  # R1-0528 repeats the tag
    ("Still thinking when it stopped", True, ("Still thinking when it stopped", "")),
    ("<think>cut off", False, ("cut off", "")),
    ("", False, (None, "")),
    ("\n\n", False, (None, "\n\n")),
    ("<thin", False, (None, "<thin")),
])
def test_separate_whole_outputs(text: str, in_reasoning: bool, want: tuple) -> None:
    assert separate(text, QWEN3, in_reasoning) == want


def test_kimi_tags() -> None:
    assert separate("\u25c1think\u25b7 why \u25c1/think\u25b7 because", KIMI, False) == ("why", "because")


@pytest.mark.parametrize("text, in_reasoning", [
    ("<think>\nA plan.\n</think>\n\nThe answer.", False),
    ("A plan with </thi and <think> inside.</think>Done </think>", True),
    ("plain text that starts with <t", False),
    ("  \n<think></think>", False),
    ("<think>never closed </th", False),
])
def test_every_cut_of_a_stream_gives_the_same_split(text: str, in_reasoning: bool) -> None:
    whole = _pieces(text, [len(text)], in_reasoning)
    for cut in range(len(text) + 1):
        assert _pieces(text, [cut, len(text)], in_reasoning) == whole, cut
    assert _pieces(text, list(range(1, len(text) + 1)), in_reasoning) == whole  # one character at a time


def _pieces(text: str, cuts: list[int], in_reasoning: bool) -> tuple[str, str]:
    stream = ReasoningStream(QWEN3, in_reasoning)
    reasoning, content, start = [], [], 0
    for cut in cuts:
        r, c = stream.feed(text[start:cut])
        reasoning.append(r)
        content.append(c)
        start = cut
    r, c = stream.finish()
    return "".join(reasoning) + r, "".join(content) + c


def test_a_stream_holds_back_only_a_possible_tag() -> None:
    stream = ReasoningStream(QWEN3, True)
    assert stream.feed("thinking </th") == ("thinking ", "")
    assert stream.feed("e") == ("</the", "")  # not the tag after all
    assert stream.feed("</think>\n") == ("", "")
    assert stream.feed("\nAnswer") == ("", "Answer")


def test_unknown_parser_names_the_flag() -> None:
    with pytest.raises(ValueError, match="--reasoning-parser"):
        get_reasoning_format("o1")


def test_a_continued_turn_is_read_for_an_open_block() -> None:
    assert continues_in_reasoning(QWEN3, "<think>\nSo far")
    assert not continues_in_reasoning(QWEN3, "<think>a</think>The answer")
    assert not continues_in_reasoning(QWEN3, "The answer")
    assert continues_in_reasoning(R1, "Thinking without a tag")  # R1 thinks until it closes the block
    assert not continues_in_reasoning(R1, "a</think>b")
