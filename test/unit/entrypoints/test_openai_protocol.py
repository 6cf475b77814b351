"""OpenAI request models and the error mapping of the HTTP layer (pure functions, no server)."""

from __future__ import annotations

import pytest

from radixlm.entrypoints.openai.protocol import (
    ChatCompletionRequest, ChatStreamChoice, CompletionRequest, DeltaMessage,
)
from radixlm.entrypoints.openai.serving_base import (
    OpenAIError, build_usage, check_context_length, check_model, check_stream_options, error_response,
    finish_reason, parse_json_body, parse_model, sampling_params,
)


def test_completion_defaults_and_prompt_forms() -> None:
    for prompt in ("a", ["a", "b"], [1, 2], [[1], [2, 3]]):
        req = parse_model(CompletionRequest, {"model": "m", "prompt": prompt})
        assert req.prompt == prompt and req.max_tokens == 16 and req.n == 1


def test_chat_content_parts_join() -> None:
    req = parse_model(ChatCompletionRequest, {"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]})
    assert req.messages[0].text() == "a\nb" and req.max_tokens is None


def test_non_text_content_part_is_named() -> None:
    with pytest.raises(OpenAIError) as info:
        parse_model(ChatCompletionRequest, {"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]})
    assert info.value.status == 400 and info.value.param == "messages.0.content"
    assert info.value.message == ("messages.0.content: content parts of type 'image_url' are not supported; "
                                  "only 'text' parts are")


@pytest.mark.parametrize("body,param", [
    ({"prompt": "x"}, "model"),
    ({"model": "m"}, "prompt"),
    ({"model": "m", "prompt": "x", "temperature": "hot"}, "temperature"),
    ({"model": "m", "prompt": "x", "n": 1.5}, "n"),
])
def test_validation_errors_name_the_param(body: dict, param: str) -> None:
    with pytest.raises(OpenAIError) as info:
        parse_model(CompletionRequest, body)
    assert info.value.status == 400 and info.value.param == param and param in info.value.message


def test_malformed_json() -> None:
    with pytest.raises(OpenAIError, match="Malformed JSON"):
        parse_json_body(b"{oops")
    with pytest.raises(OpenAIError, match="JSON object"):
        parse_json_body(b"[]")


def test_stream_options_need_a_stream() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": True}}
    with pytest.raises(OpenAIError, match="stream is true") as err:
        check_stream_options(parse_model(ChatCompletionRequest, body))
    assert err.value.param == "stream_options"
    check_stream_options(parse_model(ChatCompletionRequest, {**body, "stream": True}))


def test_logit_bias_reaches_the_sampling_params() -> None:
    req = parse_model(CompletionRequest, {"model": "m", "prompt": "x", "logit_bias": {"42": 5.0, "7": -100}})
    assert sampling_params(req, 4)["logit_bias"] == {"42": 5.0, "7": -100.0}
    assert sampling_params(parse_model(CompletionRequest, {"model": "m", "prompt": "x"}), 4)["logit_bias"] is None


def test_model_and_context_checks() -> None:
    check_model("served", "served")
    check_model("default", "served")
    with pytest.raises(OpenAIError) as info:
        check_model("other", "served")
    assert info.value.status == 404
    with pytest.raises(OpenAIError, match="9000.*8192|8192.*9000"):
        check_context_length(9000, None, 8192)
    with pytest.raises(OpenAIError, match="8192"):
        check_context_length(100, 8100, 8192)
    check_context_length(100, 8092, 8192)


def test_error_body_shape() -> None:
    response = error_response(404, "nope", "model")
    assert response.status_code == 404
    assert response.body == (b'{"object":"error","message":"nope","type":"NotFoundError","param":"model",'
                             b'"code":404}')


def test_usage_counts_prompt_once_per_prompt() -> None:
    def out(prompt: int, completion: int, cached: int) -> dict:
        return {"meta_info": {"prompt_tokens": prompt, "completion_tokens": completion, "cached_tokens": cached}}

    usage = build_usage([out(10, 3, 4), out(10, 5, 9), out(7, 2, 0), out(7, 1, 6)], n=2)
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (17, 11, 28)
    assert usage.prompt_tokens_details.cached_tokens == 4


def test_finish_reason_mapping() -> None:
    assert finish_reason({"finish_reason": None}) == (None, None)
    assert finish_reason({"finish_reason": {"type": "stop", "matched": "\n"}}) == ("stop", "\n")
    assert finish_reason({"finish_reason": {"type": "length", "length": 4}}) == ("length", None)


def test_stream_delta_carries_only_set_keys() -> None:
    assert ChatStreamChoice(index=0, delta=DeltaMessage()).model_dump()["delta"] == {}
    assert DeltaMessage(role="assistant", content="").model_dump() == {"role": "assistant", "content": ""}
