"""radixlm.function_call: the parsers, the forced-call schemas and the stream buffer, on hand-written outputs."""

from __future__ import annotations

import json
from dataclasses import astuple

import pytest

from radixlm.function_call import (
    CallDelta, ToolCallItem, ToolStreamBuffer, constrained_calls, get_tool_parser, tool_choice_schema,
)

NAMES: dict = dict.fromkeys(["get_weather", "get_time"])  # declared tools, no schemas
QWEN_TWO_CALLS = ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                  '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>')
WEATHER = ToolCallItem("get_weather", '{"city": "Paris"}')
TIME = ToolCallItem("get_time", "{}")


def test_qwen25_finds_every_call_and_keeps_the_text_before() -> None:
    result = get_tool_parser("qwen25").parse(QWEN_TWO_CALLS, NAMES)
    assert result.calls == [WEATHER, TIME] and result.content == "Let me check.\n"


def test_qwen25_takes_a_last_call_without_its_closing_tag_and_serialized_arguments() -> None:
    result = get_tool_parser("qwen25").parse('<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": '
                                             '\\"Paris\\"}"}', NAMES)
    assert result.calls == [WEATHER] and result.content is None


@pytest.mark.parametrize("text", [
    "No call here.",
    '<tool_call>{"name": "get_weather", "arguments": {"city": </tool_call>',  # malformed JSON
    '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>',  # not a declared tool
    '<tool_call>{"arguments": {}}</tool_call>',  # no name
])
def test_qwen25_leaves_anything_else_as_content(text: str) -> None:
    result = get_tool_parser("qwen25").parse(text, NAMES)
    assert result.calls == [] and result.content == text


def test_llama3_calls_with_and_without_the_python_tag() -> None:
    parser = get_tool_parser("llama3")
    two = ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
           '{"name": "get_time", "parameters": {}}')
    assert parser.parse(two, NAMES).calls == [WEATHER, TIME]
    assert parser.parse('  {"name": "get_time", "parameters": {}}', NAMES).calls == [TIME]
    for text in ('The JSON {"name": "get_time", "parameters": {}} is mid-sentence',
                 '{"name": "get_time", "parameters": {}} and then prose', '{"name": "get_time", "parameters": [1]}'):
        assert parser.parse(text, NAMES).calls == [] and parser.parse(text, NAMES).content == text


def test_mistral_with_and_without_its_control_token() -> None:
    parser = get_tool_parser("mistral")
    body = '[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_time", "arguments": {}}]'
    result = parser.parse("Sure. [TOOL_CALLS] " + body, NAMES)
    assert result.calls == [WEATHER, TIME] and result.content == "Sure. "
    assert parser.parse(body, NAMES).calls == [WEATHER, TIME]  # the special token skipped by detokenization
    for text in (body + " and more", "[1, 2]", "[TOOL_CALLS] [{oops"):
        assert parser.parse(text, NAMES).calls == []


def test_pythonic_keyword_calls_with_literal_values() -> None:
    parser = get_tool_parser("pythonic")
    result = parser.parse('[get_weather(city="Paris"), get_time()]', NAMES)
    assert result.calls == [WEATHER, TIME]
    typed = parser.parse('<|python_start|>[get_time(days=3, hourly=True, tags=["a"])]<|python_end|>', NAMES)
    assert [json.loads(c.arguments) for c in typed.calls] == [{"days": 3, "hourly": True, "tags": ["a"]}]
    for text in ('[get_time(zone=os.environ)]', '[get_time("UTC")]', "[1, 2]", "[get_time(", "[]",
                 '[launch_rockets()]'):
        assert parser.parse(text, NAMES).calls == [] and parser.parse(text, NAMES).content == text


def test_unknown_parser_is_named() -> None:
    with pytest.raises(ValueError, match="--tool-call-parser"):
        get_tool_parser("mystery")


@pytest.mark.parametrize("piece", [1, 3, 7, 1000])
def test_stream_buffer_sends_the_same_content_and_calls_in_any_pieces(piece: int) -> None:
    buffer = ToolStreamBuffer(get_tool_parser("qwen25"), NAMES)
    sent = "".join(buffer.feed(QWEN_TWO_CALLS[i:i + piece])[0] for i in range(0, len(QWEN_TWO_CALLS), piece))
    assert sent == "Let me check.\n"  # never a piece of the marker
    assert buffer.finish() == ("", [CallDelta(0, *astuple(WEATHER)), CallDelta(1, *astuple(TIME))])


def test_stream_buffer_releases_held_text_that_was_no_call() -> None:
    buffer = ToolStreamBuffer(get_tool_parser("qwen25"), NAMES, incremental=True)
    assert buffer.feed("a <tool") == ("a ", [])
    assert buffer.feed("box>") == ("<toolbox>", [])
    assert buffer.feed(" <tool_call> {oops") == (" ", [])
    assert buffer.finish() == ("<tool_call> {oops", []) and not buffer.committed
    llama = ToolStreamBuffer(get_tool_parser("llama3"), NAMES)
    assert llama.feed("  ") == ("", []) and llama.feed("Hi") == ("  Hi", [])  # leading whitespace waits


def test_forced_schemas_and_their_outputs() -> None:
    functions = {"get_weather": {"type": "object", "properties": {"city": {"type": "string"}}}, "get_time": None}
    assert tool_choice_schema(functions, "get_weather", True) == functions["get_weather"]
    assert tool_choice_schema(functions, "get_time", True) == {"type": "object"}
    required = tool_choice_schema(functions, None, False)
    assert required["minItems"] == 1 and required["maxItems"] == 1
    assert [item["properties"]["name"] for item in required["items"]["anyOf"]] == [{"const": "get_weather"},
                                                                                  {"const": "get_time"}]
    assert "maxItems" not in tool_choice_schema(functions, None, True)
    assert constrained_calls('{"city": "Paris"}', "get_weather", NAMES) == [WEATHER]
    array = json.dumps([{"name": "get_weather", "parameters": {"city": "Paris"}},
                        {"name": "get_time", "parameters": {}}])
    assert constrained_calls(array, None, NAMES) == [WEATHER, TIME]
    for text, name in (('{"city": ', "get_weather"), ("[]", None), ('[{"name": "x", "parameters": {}}]', None)):
        assert constrained_calls(text, name, NAMES) == []


QWEN3_CODER_CALLS = ("I will look it up.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                     "<parameter=days>\n3\n</parameter>\n<parameter=zip>\n75001\n</parameter>\n</function>\n"
                     "</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=utc>\nTrue\n</parameter>\n"
                     "</function>\n</tool_call>")


def test_qwen3_coder_types_values_by_the_schema() -> None:
    weather = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                                "zip": {"type": "string"}}}
    time = {"type": "object", "properties": {"utc": {"type": "boolean"}}}
    result = get_tool_parser("qwen3_coder").parse(QWEN3_CODER_CALLS, {"get_weather": weather, "get_time": time})
    assert result.content == "I will look it up.\n"
    assert [(c.name, json.loads(c.arguments)) for c in result.calls] == [
        ("get_weather", {"city": "Paris", "days": 3, "zip": "75001"}),  # a string stays a string
        ("get_time", {"utc": True})]
    untyped = get_tool_parser("qwen3_coder").parse(QWEN3_CODER_CALLS, NAMES)
    assert json.loads(untyped.calls[0].arguments) == {"city": "Paris", "days": 3, "zip": 75001}  # no schema: JSON


@pytest.mark.parametrize("text", [
    "<tool_call>\n<function=get_time>\nstray text\n</function>\n</tool_call>",  # not a parameter
    "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>",  # not declared
    "<tool_call>\n<function=get_time>\n</function>\n</tool_call> and then more words",
])
def test_qwen3_coder_leaves_anything_else_as_content(text: str) -> None:
    assert get_tool_parser("qwen3_coder").parse(text, NAMES).calls == []


def test_qwen3_coder_reads_a_call_cut_off_and_streams_it_whole() -> None:
    cut = "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC"
    assert get_tool_parser("qwen3_coder").parse(cut, NAMES).calls == [ToolCallItem("get_time", '{"zone": "UTC"}')]
    buffer = ToolStreamBuffer(get_tool_parser("qwen3_coder"), NAMES, incremental=True)
    pieces = [buffer.feed(QWEN3_CODER_CALLS[i:i + 5]) for i in range(0, len(QWEN3_CODER_CALLS), 5)]
    assert "".join(content for content, _ in pieces) == "I will look it up.\n" and not any(d for _, d in pieces)
    rest, deltas = buffer.finish()
    assert rest == "" and [d.name for d in deltas] == ["get_weather", "get_time"]
