"""chat_tools.plan_tools: which tool_choice needs what, and the 400s it names (pure, no server)."""

from __future__ import annotations

import json

import pytest

from radixlm.entrypoints.openai.chat_tools import ToolRequestError, plan_tools, template_message
from radixlm.entrypoints.openai.protocol import ChatCompletionRequest, ChatMessage

TOOL = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}


def request(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "x"}],
                                                 **fields})


def test_no_tools_or_none_plans_nothing() -> None:
    assert plan_tools(request(), None, "xgrammar") is None
    assert plan_tools(request(tools=[TOOL], tool_choice="none"), None, "xgrammar") is None


def test_auto_needs_a_parser_and_forced_choices_do_not() -> None:
    with pytest.raises(ToolRequestError, match="--tool-call-parser") as err:
        plan_tools(request(tools=[TOOL]), None, "xgrammar")
    assert err.value.param == "tool_choice"
    auto = plan_tools(request(tools=[TOOL]), "qwen25", "xgrammar")
    assert auto is not None and auto.parser is not None and auto.json_schema is None
    named = plan_tools(request(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_time"}}),
                       None, "xgrammar")
    assert named is not None and named.forced_name == "get_time" and json.loads(named.json_schema) == {"type": "object"}
    required = plan_tools(request(tools=[TOOL], tool_choice="required"), None, "xgrammar")
    assert required is not None and json.loads(required.json_schema)["type"] == "array"


def test_forced_choice_needs_a_grammar_backend() -> None:
    with pytest.raises(ToolRequestError) as err:
        plan_tools(request(tools=[TOOL], tool_choice="required"), None, "none")
    assert err.value.param == "tools"


def test_split_returns_content_or_calls() -> None:
    auto = plan_tools(request(tools=[TOOL]), "llama3", "xgrammar")
    assert auto is not None
    assert auto.split('{"name": "get_time", "parameters": {}}')[1][0].name == "get_time"
    assert auto.split("Just text.") == ("Just text.", [])


def test_template_message_passes_tool_turns() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    assistant = template_message(ChatMessage.model_validate({"role": "assistant", "content": None,
                                                             "tool_calls": [call]}))
    assert assistant["content"] == "" and assistant["tool_calls"][0]["function"]["arguments"] == {"zone": "UTC"}
    tool = template_message(ChatMessage.model_validate({"role": "tool", "tool_call_id": "call_1", "content": "12:00"}))
    assert tool == {"role": "tool", "content": "12:00", "tool_call_id": "call_1"}
