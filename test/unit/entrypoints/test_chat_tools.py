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


# A tool-aware ChatML template written for this test (SmolLM2's own ignores `tools`)
TOOL_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "{{ t.function.parameters | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "{%- else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def test_tools_and_tool_turns_reach_the_chat_template(smollm2_dir: str) -> None:
    from types import SimpleNamespace

    from radixlm.entrypoints.openai.serving_chat import OpenAIServingChat
    from radixlm.model_loader.tokenizer import get_tokenizer

    tokenizer = get_tokenizer(smollm2_dir)
    chat = OpenAIServingChat(SimpleNamespace(tokenizer=tokenizer), TOOL_TEMPLATE, "qwen25")
    call = {"id": "call_1", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "UTC"}'}}
    messages = [{"role": "user", "content": "Time?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": "12:00"}]

    def rendered(**fields: object) -> str:
        req = request(messages=messages, **fields)
        return chat.prompt_text(req, plan_tools(req, "qwen25", "xgrammar"))

    with_tools = rendered(tools=[TOOL])
    assert 'Tools: get_time{"type": "object"}' in with_tools
    assert '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>' in with_tools
    assert "<|im_start|>tool\n12:00<|im_end|>" in with_tools
    without = rendered(tools=[TOOL], tool_choice="none")
    assert "Tools:" not in without and "<tool_call>" in without  # "none": the history stays, the tools go
