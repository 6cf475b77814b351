"""Reasoning on `/v1/chat/completions` against the real server (SmolLM2, `--reasoning-parser qwen3`), with the
official `openai` client. SmolLM2 does not think, so a regex (an SGLang extension, sent in extra_body) forces a
`<think>` block before the answer: the block goes to `reasoning_content`, streamed or whole, and only the answer
to `content`."""

from __future__ import annotations

import re
from typing import Any

import httpx
import openai
import pytest

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]
THINK_THEN_ANSWER = r"<think>[a-z ]{4,40}</think>[A-Z][a-z ]{2,30}\."
FORCED: dict[str, Any] = {"temperature": 0.0, "max_tokens": 120, "extra_body": {"regex": THINK_THEN_ANSWER}}


@pytest.fixture(scope="module")
def client(http_server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{http_server.base_url}/v1", api_key=http_server.api_key, max_retries=0,
                         timeout=300)


def with_body(**extra: Any) -> dict:
    return {**FORCED, "extra_body": {**FORCED["extra_body"], **extra}}


def test_the_block_goes_to_reasoning_content(client: openai.OpenAI) -> None:
    raw = client.chat.completions.create(model="default", messages=MESSAGES,
                                         **with_body(separate_reasoning=False)).choices[0].message
    assert raw.content is not None and re.fullmatch(THINK_THEN_ANSWER, raw.content) and raw.reasoning_content is None
    thought, answer = raw.content.removeprefix("<think>").split("</think>")
    message = client.chat.completions.create(model="default", messages=MESSAGES, **FORCED).choices[0].message
    assert (message.reasoning_content, message.content) == (thought.strip(), answer)


@pytest.mark.parametrize("stream_reasoning", [True, False])
def test_a_stream_assembles_to_the_same_split(client: openai.OpenAI, stream_reasoning: bool) -> None:
    whole = client.chat.completions.create(model="default", messages=MESSAGES, **FORCED).choices[0].message
    reasoning, content, finish = [], [], None
    for chunk in client.chat.completions.create(model="default", messages=MESSAGES, stream=True,
                                                **with_body(stream_reasoning=stream_reasoning)):
        for choice in chunk.choices:
            delta = choice.delta.model_dump()
            if delta.get("reasoning_content"):
                reasoning.append(delta["reasoning_content"])
            content.append(delta.get("content") or "")
            finish = choice.finish_reason or finish
    assert "".join(reasoning).strip() == whole.reasoning_content and "".join(content) == whole.content
    assert finish == "stop" and (stream_reasoning or len(reasoning) == 1)


def test_an_answer_without_a_block_has_no_reasoning(client: openai.OpenAI) -> None:
    message = client.chat.completions.create(model="default", messages=MESSAGES, temperature=0.0, max_tokens=8,
                                             extra_body={"regex": "[A-Z][a-z]+"}).choices[0].message
    assert message.reasoning_content is None and re.fullmatch("[A-Z][a-z]+", message.content)


@pytest.mark.parametrize("extra,param", [
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),
    ({"regex": "a+", "response_format": {"type": "json_object"}}, "regex"),
    ({"regex": "(unclosed"}, "regex"),
])
def test_bad_requests_get_a_400_and_the_server_goes_on(client: openai.OpenAI, extra: dict, param: str) -> None:
    body = dict(extra)
    response_format = body.pop("response_format", openai.NOT_GIVEN)
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=4,
                                       response_format=response_format, extra_body=body)
    assert err.value.status_code == 400 and err.value.body["param"] == param
    assert client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=2).choices[0].message


def test_separate_reasoning_endpoint(http_server: Any) -> None:
    headers = {"Authorization": f"Bearer {http_server.api_key}"}
    with httpx.Client(base_url=http_server.base_url, headers=headers, timeout=30) as http:
        r1 = http.post("/separate_reasoning", json={"text": "why\n</think>\n\nso", "reasoning_parser": "deepseek-r1"})
        assert r1.status_code == 200 and r1.json() == {"text": "so", "reasoning_text": "why"}
        own = http.post("/separate_reasoning", json={"text": "plain"})  # the server's qwen3: no block, no reasoning
        assert own.json() == {"text": "plain", "reasoning_text": ""}
        bad = http.post("/separate_reasoning", json={"text": "x", "reasoning_parser": "o1"})
        assert bad.status_code == 400 and bad.json()["param"] == "reasoning_parser"


def test_a_constrained_request_thinks_freely_first(client: openai.OpenAI) -> None:
    """The assistant turn being continued opened a block, so the output starts in it: the regex waits for the
    block to end, which SmolLM2 never writes (the switch at the end tag: test/unit/constrained/test_reasoner.py)."""
    for turn in ("<think>\n", "<think>\nThe question is about"):
        opened = MESSAGES + [{"role": "assistant", "content": turn}]
        message = client.chat.completions.create(
            model="default", messages=opened, temperature=0.0, max_tokens=12,
            extra_body={"regex": "[0-9]{1,3}", "continue_final_message": True}).choices[0].message
        assert not message.content and message.reasoning_content  # all of it thinking
        assert not re.fullmatch("[0-9]{1,3}", message.reasoning_content)  # words: the regex did not apply yet
    closed = MESSAGES + [{"role": "assistant", "content": "<think>\nEasy.\n</think>\n\nIt has"}]
    answer = client.chat.completions.create(
        model="default", messages=closed, temperature=0.0, max_tokens=12,
        extra_body={"regex": "[0-9]{1,3}", "continue_final_message": True}).choices[0].message
    assert re.fullmatch("[0-9]{1,3}", answer.content) and answer.reasoning_content is None


def test_require_reasoning_on_generate_is_checked(http_server: Any) -> None:
    headers = {"Authorization": f"Bearer {http_server.api_key}"}
    with httpx.Client(base_url=http_server.base_url, headers=headers, timeout=60) as http:
        body = {"text": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n",
                "sampling_params": {"max_new_tokens": 8, "temperature": 0, "regex": "[0-9]{1,3}"}}
        free = http.post("/generate", json={**body, "require_reasoning": True}).json()["text"]
        bound = http.post("/generate", json=body).json()["text"]
        assert re.fullmatch("[0-9]{1,3}", bound) and not re.fullmatch("[0-9]{1,3}", free)
        bad = http.post("/generate", json={**body, "require_reasoning": "yes"})
        assert bad.status_code == 400 and "require_reasoning" in bad.json()["message"]
