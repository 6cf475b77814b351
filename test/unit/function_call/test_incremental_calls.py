"""Streamed tool calls: json_scan on JSON still being written, and the stream buffer announcing calls and sending
their arguments as they come, for every format and every cut of the text, against the whole-output parse."""

from __future__ import annotations

import json

import pytest

from radixlm.function_call import ToolStreamBuffer, get_tool_parser
from radixlm.function_call.json_scan import object_starts, scan_call

NAMES: dict = dict.fromkeys(["get_weather", "get_time"])  # declared tools, no schemas
ARGS = '{"city": "Paris", "note": "a {brace}, a \\"quote\\""}'
OUTPUTS = {  # parser -> an output with two calls (the first with tricky arguments)
    "qwen25": f'Checking.\n<tool_call>\n{{"name": "get_weather", "arguments": {ARGS}}}\n</tool_call>\n'
              '<tool_call>\n{"name": "get_time", "arguments": {"zone": "UTC"}}\n</tool_call>',
    "llama3": f'<|python_tag|>{{"name": "get_weather", "parameters": {ARGS}}}; '
              '{"name": "get_time", "parameters": {"zone": "UTC"}}',
    "mistral": f'[TOOL_CALLS][{{"name": "get_weather", "arguments": {ARGS}}}, '
               '{"name": "get_time", "arguments": {"zone": "UTC"}}]',
}


def test_scan_reads_a_call_as_far_as_it_goes() -> None:
    text = f'{{"name": "get_weather", "arguments": {ARGS}}}'
    whole = scan_call(text, 0, ("arguments",))
    assert whole.name == "get_weather" and text[whole.args_start:whole.args_end] == ARGS and whole.end == len(text)
    cut = text.index("Paris")
    part = scan_call(text[:cut], 0, ("arguments",))
    assert part.name == "get_weather" and part.args_start == whole.args_start and part.args_end is None
    assert scan_call('{"name": "get_wea', 0, ("arguments",)).name is None  # not complete yet
    args_first = scan_call('{"arguments": {"a": 1}, "name": "f"}', 0, ("arguments",))
    assert (args_first.name, args_first.args_end) == ("f", len('{"arguments": {"a": 1}'))
    assert scan_call('{"name": "f", "arguments": "{\\"a\\": 1}"}', 0, ("arguments",)).args_is_string


def test_object_starts_skip_strings_and_other_depths() -> None:
    text = '[{"a": "{not one}"}, {"b": {"c": 1}}]'
    assert object_starts(text, 1) == [1, 21] and object_starts(text, 0) == []


def assemble(buffer: ToolStreamBuffer, text: str, cuts: list[int]) -> tuple[str, dict[int, list]]:
    """Feed `text` cut at `cuts`; (content, {index: [name, arguments, pieces before the end]})."""
    content, calls, start = "", {}, 0
    for cut in cuts + [len(text)]:
        piece, deltas = buffer.feed(text[start:cut])
        content, start = content + piece, cut
        for d in deltas:
            entry = calls.setdefault(d.index, [d.name, "", 0])
            entry[1] += d.arguments
            entry[2] += 1
    rest, deltas = buffer.finish()
    for d in deltas:
        entry = calls.setdefault(d.index, [d.name, "", 0])
        entry[1] += d.arguments
    return content + rest, calls


@pytest.mark.parametrize("parser", sorted(OUTPUTS))
def test_every_cut_streams_the_calls_of_the_whole_parse(parser: str) -> None:
    text = OUTPUTS[parser]
    whole = get_tool_parser(parser).parse(text, NAMES)
    assert [c.name for c in whole.calls] == ["get_weather", "get_time"]
    for cut in range(len(text) + 1):
        buffer = ToolStreamBuffer(get_tool_parser(parser), NAMES, incremental=True)
        content, calls = assemble(buffer, text, [cut])
        assert content == (whole.content or ""), cut
        assert [(name, json.loads(args)) for name, args, _ in calls.values()] == \
            [(c.name, json.loads(c.arguments)) for c in whole.calls], cut
    buffer = ToolStreamBuffer(get_tool_parser(parser), NAMES, incremental=True)
    _, calls = assemble(buffer, text, list(range(len(text))))  # one character at a time
    assert calls[0][1] == ARGS and calls[0][2] > 10  # the model's own text, in many pieces before the end


def test_forced_forms_stream_too() -> None:
    named = ToolStreamBuffer(None, NAMES, forced=True, forced_name="get_weather", incremental=True)
    _, calls = assemble(named, ARGS, list(range(len(ARGS))))
    assert calls[0][:2] == ["get_weather", ARGS] and calls[0][2] > 10
    required_text = f'[{{"name": "get_weather", "parameters": {ARGS}}}]'
    required = ToolStreamBuffer(None, NAMES, forced=True, incremental=True)
    _, calls = assemble(required, required_text, list(range(len(required_text))))
    assert calls[0][:2] == ["get_weather", ARGS] and calls[0][2] > 10


def test_undeclared_names_and_string_arguments_wait_for_the_end() -> None:
    undeclared = '<tool_call>\n{"name": "rm_rf", "arguments": {}}\n</tool_call>'
    buffer = ToolStreamBuffer(get_tool_parser("qwen25"), NAMES, incremental=True)
    assert assemble(buffer, undeclared, list(range(len(undeclared)))) == (undeclared, {})  # content, no call
    serialized = '<tool_call>\n{"name": "get_time", "arguments": "{\\"zone\\": \\"UTC\\"}"}\n</tool_call>'
    buffer = ToolStreamBuffer(get_tool_parser("qwen25"), NAMES, incremental=True)
    content, calls = assemble(buffer, serialized, list(range(len(serialized))))
    assert content == "" and calls == {0: ["get_time", '{"zone": "UTC"}', 0]}  # whole, from the full parse


def test_pythonic_calls_are_sent_whole() -> None:
    text = '[get_time(zone="UTC")]'
    buffer = ToolStreamBuffer(get_tool_parser("pythonic"), NAMES, incremental=True)
    assert assemble(buffer, text, list(range(len(text)))) == ("", {0: ["get_time", '{"zone": "UTC"}', 0]})
