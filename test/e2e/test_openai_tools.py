"""Tool calling on `/v1/chat/completions` against the real server (SmolLM2, `--tool-call-parser llama3`), with the
official `openai` client: forced calls (a named function, "required"), parsed calls ("auto"), streams that
assemble to the same calls, tool turns in the history, and the 400s."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

pytestmark = pytest.mark.slow

WEATHER_PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Paris", "Berlin", "Madrid"]},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "unit"], "additionalProperties": False}
TIME_PARAMS = {"type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}},
               "required": ["zone"], "additionalProperties": False}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather in a city",
                                      "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "get_time", "description": "Current time in a zone",
                                      "parameters": TIME_PARAMS}},
]
PARAMS = {"get_weather": WEATHER_PARAMS, "get_time": TIME_PARAMS}
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY: dict[str, Any] = {"temperature": 0.0, "max_tokens": 64}


@pytest.fixture(scope="module")
def client(http_server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{http_server.base_url}/v1", api_key=http_server.api_key, max_retries=0,
                         timeout=300)


def check_calls(calls: list, names: set[str]) -> list[tuple[str, dict]]:
    """Every call names a declared tool and carries arguments valid under its schema; [(name, arguments)]."""
    out = []
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_") and call.function.name in names
        arguments = json.loads(call.function.arguments)
        jsonschema.validate(arguments, PARAMS[call.function.name])
        out.append((call.function.name, arguments))
    return out


def streamed(client: openai.OpenAI, **kwargs: Any) -> tuple[str, list[tuple[str, dict]], str, list[int]]:
    """A streamed chat, assembled as a client would: (content, [(name, arguments)], finish_reason, [the deltas
    that carried each call's arguments]). A call's first delta carries its id and name, later ones more arguments."""
    content, calls, reason = "", {}, None
    for chunk in client.chat.completions.create(model="default", stream=True, **kwargs):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            first = call.index not in calls
            assert (call.id is not None, call.function.name is not None) == (first, first)
            entry = calls.setdefault(call.index, {"name": "", "arguments": "", "pieces": 0})
            entry["name"] += call.function.name or ""
            entry["arguments"] += call.function.arguments or ""
            entry["pieces"] += bool(call.function.arguments)
        reason = chunk.choices[0].finish_reason or reason
    ordered = [c for _, c in sorted(calls.items())]
    return content, [(c["name"], json.loads(c["arguments"])) for c in ordered], reason, [c["pieces"] for c in ordered]


def test_named_function_is_called_with_valid_arguments(client: openai.OpenAI) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    out = client.chat.completions.create(model="default", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                         **GREEDY)
    message = out.choices[0].message
    assert out.choices[0].finish_reason == "tool_calls" and message.content is None
    calls = check_calls(message.tool_calls, {"get_weather"})
    assert len(calls) == 1
    content, stream_calls, reason, pieces = streamed(client, messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                                     **GREEDY)
    assert (content, stream_calls, reason) == ("", calls, "tool_calls")
    assert pieces[0] > 3  # the arguments came as the model wrote them, not in one piece at the end


def test_required_gives_at_least_one_call(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model="default", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                         parallel_tool_calls=False, **GREEDY)
    assert out.choices[0].finish_reason == "tool_calls"
    assert len(check_calls(out.choices[0].message.tool_calls, {"get_weather", "get_time"})) == 1


def test_auto_parses_a_call_in_the_model_output(client: openai.OpenAI) -> None:
    """"auto" with the llama3 parser: the output is forced (response_format) into the JSON a llama3 call is, and
    the parser, not the forcing, turns it into a tool call; the stream holds it back and sends the same call."""
    call_schema = {"type": "object", "properties": {"name": {"const": "get_time"}, "parameters": TIME_PARAMS},
                   "required": ["name", "parameters"], "additionalProperties": False}
    response_format = {"type": "json_schema", "json_schema": {"name": "call", "schema": call_schema}}
    kwargs = dict(messages=MESSAGES, tools=TOOLS, tool_choice="auto", response_format=response_format, **GREEDY)
    out = client.chat.completions.create(model="default", **kwargs)
    assert out.choices[0].finish_reason == "tool_calls"
    calls = check_calls(out.choices[0].message.tool_calls, {"get_time"})
    assert len(calls) == 1
    assert streamed(client, **kwargs)[:3] == ("", calls, "tool_calls")


def test_auto_without_a_call_returns_content(client: openai.OpenAI) -> None:
    kwargs = dict(messages=MESSAGES, tools=TOOLS, temperature=0.0, max_tokens=8)
    out = client.chat.completions.create(model="default", **kwargs)
    plain = client.chat.completions.create(model="default", messages=MESSAGES, temperature=0.0, max_tokens=8)
    choice = out.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "length" and choice.message.content
    content, calls, reason, _ = streamed(client, **kwargs)
    assert (content, calls, reason) == (choice.message.content, [], "length")
    assert plain.choices[0].message.tool_calls is None


def test_tool_turns_in_the_history(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(model="default", messages=MESSAGES, tools=TOOLS, tool_choice="required",
                                           **GREEDY)
    call = first.choices[0].message.tool_calls[0]
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18})},
    ]
    out = client.chat.completions.create(model="default", messages=history, tools=TOOLS, tool_choice="none",
                                         temperature=0.0, max_tokens=8)
    assert out.choices[0].message.content and out.choices[0].message.tool_calls is None


@pytest.mark.parametrize("extra,param,fragment", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice", "not among the tools"),
    ({"tools": None, "tool_choice": "required"}, "tool_choice", "needs tools"),
    ({"tools": TOOLS + TOOLS[:1]}, "tools", "appears twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "nope"}}}],
      "tool_choice": "required"}, "tools", "tools"),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "response_format", "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools", "name"),
])
def test_bad_tool_requests_get_a_400(client: openai.OpenAI, extra: dict, param: str, fragment: str) -> None:
    body: dict = {"messages": MESSAGES, "tools": TOOLS, **GREEDY, **extra}
    if body["tools"] is None:
        del body["tools"]
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="default", **body)
    assert err.value.status_code == 400 and fragment in err.value.message
    assert err.value.body["param"].startswith(param)
