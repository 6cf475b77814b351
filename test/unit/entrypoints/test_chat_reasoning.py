"""Reasoning on the chat API without a server: chat_template_kwargs reach the template, the rendered prompt
decides where the output starts, and a finished output and a stream of it split into the same reasoning and
answer (the real server: test/e2e/test_openai_reasoning.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from radixlm.entrypoints.openai.protocol import ChatCompletionRequest
from radixlm.entrypoints.openai.serving_base import OpenAIError
from radixlm.entrypoints.openai.serving_chat import OpenAIServingChat, _ChatStreamState

# Qwen3's switch, written for this test: thinking off closes an empty block in the prompt
THINKING_TEMPLATE = (
    "{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% elif force_open is defined and force_open %}<think>\n{% endif %}{% endif %}")
OUTPUT = "<think>\nTwo plus two.\n</think>\n\nIt is 4."


@pytest.fixture(scope="module")
def chat(smollm2_dir: str) -> OpenAIServingChat:
    from radixlm.model_loader.tokenizer import get_tokenizer

    manager = SimpleNamespace(tokenizer=get_tokenizer(smollm2_dir), context_len=2048, served_model_name="m",
                              server_args=SimpleNamespace(grammar_backend="xgrammar"))
    return OpenAIServingChat(manager, THINKING_TEMPLATE, None, "qwen3")


def request(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate(
        {"model": "m", "messages": [{"role": "user", "content": "2+2?"}], "temperature": 0, **fields})


def test_template_kwargs_and_the_prompt_decide_the_start(chat: OpenAIServingChat) -> None:
    assert chat.prompt_text(request(chat_template_kwargs={"enable_thinking": False})).endswith("</think>\n\n")
    plain = chat.plan(request())
    assert plain.reasoning is not None and not plain.reasoning.in_reasoning
    assert chat.plan(request(chat_template_kwargs={"force_open": True})).reasoning.in_reasoning
    assert not plain.obj.require_reasoning  # unconstrained: nothing for the scheduler to wait on
    opened = chat.plan(request(chat_template_kwargs={"force_open": True}, regex="[0-9]+"))
    assert opened.reasoning.in_reasoning and opened.obj.require_reasoning  # think, then the regex
    assert not chat.plan(request(regex="[0-9]+")).obj.require_reasoning
    unsplit = chat.plan(request(chat_template_kwargs={"force_open": True}, regex="[0-9]+", separate_reasoning=False))
    assert unsplit.reasoning is None and unsplit.obj.require_reasoning  # it still thinks first


def test_template_kwargs_may_not_replace_the_requests_own(chat: OpenAIServingChat) -> None:
    with pytest.raises(OpenAIError) as err:
        chat.plan(request(chat_template_kwargs={"add_generation_prompt": False, "messages": []}))
    assert err.value.param == "chat_template_kwargs" and "add_generation_prompt, messages" in str(err.value)


def test_one_constraint_per_request(chat: OpenAIServingChat) -> None:
    with pytest.raises(OpenAIError) as err:
        chat.plan(request(response_format={"type": "json_object"}, regex="a+"))
    assert err.value.param == "regex"
    with pytest.raises(OpenAIError) as err:
        chat.plan(request(ebnf="root ::= ("))
    assert err.value.param == "ebnf"
    assert chat.plan(request(regex="[0-9]+")).obj.sampling_params["regex"] == "[0-9]+"


def output(text: str, finished: bool) -> dict:
    meta = {"prompt_tokens": 3, "completion_tokens": 5, "cached_tokens": 0,
            "finish_reason": {"type": "stop", "matched": None} if finished else None}
    return {"text": text, "meta_info": meta, "index": 0}


def test_a_response_splits_reasoning_from_the_answer(chat: OpenAIServingChat) -> None:
    message = chat.response(chat.plan(request()), [output(OUTPUT, True)]).choices[0].message
    assert (message.reasoning_content, message.content) == ("Two plus two.", "It is 4.")
    whole = chat.response(chat.plan(request(separate_reasoning=False)), [output(OUTPUT, True)]).choices[0].message
    assert (whole.reasoning_content, whole.content) == (None, OUTPUT)


@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_a_stream_cut_anywhere_assembles_to_the_response(chat: OpenAIServingChat, stream_reasoning: bool) -> None:
    plan = chat.plan(request(stream=True, stream_reasoning=stream_reasoning))
    for cut in range(1, len(OUTPUT)):
        deltas = streamed(chat, plan, [OUTPUT[:cut], OUTPUT])
        reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
        assert reasoning.strip() == "Two plus two." and "".join(d.get("content", "") for d in deltas) == "It is 4."
        if not stream_reasoning:
            assert sum("reasoning_content" in d for d in deltas) == 1  # held, then sent in one delta


def streamed(chat: OpenAIServingChat, plan: Any, texts: list[str]) -> list[dict]:
    state, deltas = _ChatStreamState(), []
    for i, text in enumerate(texts):
        for chunk in chat.chunks(plan, state, output(text, i == len(texts) - 1)):
            body = json.loads(chunk.decode().removeprefix("data: "))
            deltas += [choice["delta"] for choice in body["choices"]]
    return deltas
