"""The OpenAI-compatible and native HTTP API against a real server (official `openai` client)."""

from __future__ import annotations

import json
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

try:
    import httpx
except ImportError:  # some openai builds vendor it as httpx2 (same API)
    import httpx2 as httpx
import openai
import pytest

pytestmark = pytest.mark.slow

MESSAGES = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Name three colors."}]
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def client(http_server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{http_server.base_url}/v1", api_key=http_server.api_key, max_retries=0,
                         timeout=300)


@pytest.fixture(scope="module")
def http(http_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {http_server.api_key}"}
    with httpx.Client(base_url=http_server.base_url, headers=headers, timeout=300) as c:
        yield c


def sse_events(response: httpx.Response) -> list:
    """`data: ...` payloads of an SSE response, `[DONE]` kept as the string."""
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            payload = line[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def test_models(client: openai.OpenAI, http_server: Any) -> None:
    models = client.models.list().data
    assert len(models) == 1
    assert client.models.retrieve(models[0].id).id == models[0].id


def test_chat_non_stream(client: openai.OpenAI) -> None:
    out = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=6, **GREEDY)
    choice = out.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason == "length"
    assert out.usage.completion_tokens == 6
    assert out.usage.total_tokens == out.usage.prompt_tokens + 6


def test_chat_stream_matches_non_stream_and_order(client: openai.OpenAI, http: httpx.Client) -> None:
    whole = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=6, **GREEDY)
    chunks = list(client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=6, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 6
    content = "".join(c.choices[0].delta.content or "" for c in chunks[1:-2])
    assert content == whole.choices[0].message.content
    assert all(c.choices[0].finish_reason is None for c in chunks[:-2])
    body = {"model": "default", "messages": MESSAGES, "max_tokens": 3, "stream": True, "temperature": 0,
            "stream_options": {"include_usage": True}}
    with http.stream("POST", "/v1/chat/completions", json=body) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-3]["choices"][0]["finish_reason"] == "length" and events[-3]["choices"][0]["delta"] == {}
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 3


def test_continuous_usage_stats_count_each_chunk(client: openai.OpenAI) -> None:
    options = {"include_usage": True, "continuous_usage_stats": True}
    chunks = list(client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=5, stream=True,
                                                 stream_options=options, **GREEDY))
    so_far = [c.usage.completion_tokens for c in chunks if c.choices]
    assert so_far[-1] == 5 and so_far == sorted(so_far) and len(so_far) > 3  # one count per chunk, growing
    assert all(c.usage.prompt_tokens == chunks[-1].usage.prompt_tokens for c in chunks)
    texts = list(client.completions.create(model="default", prompt="The capital of France is", max_tokens=4,
                                           stream=True, stream_options=options, **GREEDY))
    assert [c.usage.completion_tokens for c in texts if c.choices][-1] == 4 and texts[-1].usage.completion_tokens == 4


def test_completions_stream_matches_non_stream(client: openai.OpenAI) -> None:
    prompt = "The capital of France is"
    whole = client.completions.create(model="default", prompt=prompt, max_tokens=6, **GREEDY)
    assert whole.choices[0].finish_reason == "length" and whole.usage.completion_tokens == 6
    chunks = list(client.completions.create(model="default", prompt=prompt, max_tokens=6, stream=True, **GREEDY))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"


def test_completions_prompt_forms(client: openai.OpenAI, http: httpx.Client) -> None:
    ids = http.post("/v1/tokenize", json={"prompt": "Once upon a time"}).json()["tokens"]
    by_text = client.completions.create(model="default", prompt="Once upon a time", max_tokens=4, **GREEDY)
    by_ids = client.completions.create(model="default", prompt=ids, max_tokens=4, **GREEDY)
    assert by_ids.choices[0].text == by_text.choices[0].text
    batch = client.completions.create(model="default", prompt=["Once upon a time", "One, two,"], max_tokens=3,
                                      **GREEDY)
    assert [c.index for c in batch.choices] == [0, 1]
    assert batch.choices[0].text == by_text.choices[0].text[:len(batch.choices[0].text)]
    echo = client.completions.create(model="default", prompt="Once upon a time", max_tokens=2, echo=True, **GREEDY)
    assert echo.choices[0].text.startswith("Once upon a time")


def test_n2(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=4, n=2, temperature=0.9,
                                          seed=7)
    assert [c.index for c in chat.choices] == [0, 1]
    assert chat.usage.completion_tokens == 8
    comp = client.completions.create(model="default", prompt="Hello", max_tokens=3, n=2, temperature=0.9, seed=7)
    assert [c.index for c in comp.choices] == [0, 1]
    streamed = list(client.completions.create(model="default", prompt="Hello", max_tokens=3, n=2, temperature=0.9,
                                              seed=7, stream=True))
    for index in (0, 1):
        text = "".join(c.choices[0].text for c in streamed if c.choices[0].index == index)
        assert text == comp.choices[index].text


def test_stop_string(client: openai.OpenAI) -> None:
    prompt = "Count: 1, 2, 3, 4, 5,"
    free = client.completions.create(model="default", prompt=prompt, max_tokens=8, **GREEDY).choices[0].text
    stop = free.strip().split()[1] if len(free.split()) > 1 else free[-2:]
    out = client.completions.create(model="default", prompt=prompt, max_tokens=8, stop=[stop], **GREEDY)
    assert out.choices[0].finish_reason == "stop"
    assert stop not in out.choices[0].text
    assert free.startswith(out.choices[0].text)


def test_logprobs(client: openai.OpenAI) -> None:
    chat = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=4, logprobs=True,
                                          top_logprobs=2, **GREEDY)
    content = chat.choices[0].logprobs.content
    assert len(content) == 4
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-4)  # greedy = the top token
    assert "".join(e.token for e in content) == chat.choices[0].message.content
    comp = client.completions.create(model="default", prompt="The sky is", max_tokens=3, logprobs=2, echo=True,
                                     **GREEDY)
    lp = comp.choices[0].logprobs
    assert lp.token_logprobs[0] is None and len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset)
    assert "".join(lp.tokens) == comp.choices[0].text
    assert all(len(top) == 2 for top in lp.top_logprobs[-3:])


def test_logit_bias_steers_its_own_request_only(client: openai.OpenAI, http: httpx.Client) -> None:
    prompt = "The capital of France is"
    free = http.post("/generate", json={"text": prompt, "sampling_params": {"max_new_tokens": 4,
                                                                           "temperature": 0}}).json()
    first = free["output_ids"][0]
    banned = http.post("/generate", json={"text": prompt, "sampling_params": {
        "max_new_tokens": 4, "temperature": 0, "logit_bias": {str(first): -100}}}).json()
    assert banned["output_ids"][0] != first
    forced_id = http.post("/v1/tokenize", json={"prompt": " blue"}).json()["tokens"][0]
    # a forced request and a plain one in flight together: the bias belongs to its row of the batch
    with ThreadPoolExecutor(2) as pool:
        forced = pool.submit(client.completions.create, model="default", prompt=prompt, max_tokens=4,
                             logit_bias={str(forced_id): 100}, **GREEDY)
        plain = pool.submit(client.completions.create, model="default", prompt=prompt, max_tokens=4, **GREEDY)
    forced_text = http.post("/v1/detokenize", json={"tokens": [forced_id] * 4}).json()["text"]
    assert forced.result().choices[0].text == forced_text
    assert plain.result().choices[0].text == free["text"]


def test_usage_reports_cached_tokens(client: openai.OpenAI) -> None:
    long_user = f"Session {uuid.uuid4().hex}. " + "Please remember this sentence about rivers and hills. " * 8
    messages = [{"role": "user", "content": long_user}]
    first = client.chat.completions.create(model="default", messages=messages, max_tokens=2, **GREEDY)
    second = client.chat.completions.create(model="default", messages=messages, max_tokens=2, **GREEDY)
    assert first.usage.prompt_tokens_details.cached_tokens < first.usage.prompt_tokens // 2
    assert second.usage.prompt_tokens_details.cached_tokens >= second.usage.prompt_tokens - 2
    salted = client.chat.completions.create(model="default", messages=messages, max_tokens=2,
                                            extra_body={"cache_salt": "tenant-b"}, **GREEDY)
    assert salted.usage.prompt_tokens_details.cached_tokens == 0


def test_chat_continue_final_message(client: openai.OpenAI) -> None:
    messages = MESSAGES + [{"role": "assistant", "content": "Red, green and"}]
    out = client.chat.completions.create(model="default", messages=messages, max_tokens=3,
                                         extra_body={"continue_final_message": True}, **GREEDY)
    assert out.choices[0].message.content


def test_greedy_chat_matches_engine(client: openai.OpenAI) -> None:
    from radixlm.entrypoints.engine import Engine

    server = client.chat.completions.create(model="default", messages=MESSAGES, max_tokens=10, **GREEDY)
    with Engine(max_total_tokens=4096) as engine:
        tokenizer = engine.tokenizer
        prompt = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        out = engine.generate(input_ids=ids, sampling_params={"max_new_tokens": 10, "temperature": 0})
    assert server.choices[0].message.content == out["text"]


def test_native_generate(http: httpx.Client) -> None:
    body = {"text": "The capital of France is", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    out = http.post("/generate", json=body).json()
    assert out["meta_info"]["completion_tokens"] == 4 and out["meta_info"]["finish_reason"]["type"] == "length"
    with http.stream("POST", "/generate", json={**body, "stream": True}) as response:
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    texts = [e["text"] for e in events[:-1]]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative
    assert texts[-1] == out["text"]
    batch = http.post("/generate", json={"text": ["Hi", "Yes"], "sampling_params": {"max_new_tokens": 2}}).json()
    assert isinstance(batch, list) and len(batch) == 2


def test_tokenize_detokenize(http: httpx.Client) -> None:
    tok = http.post("/v1/tokenize", json={"prompt": "hello world"}).json()
    assert tok["count"] == len(tok["tokens"]) > 0 and tok["max_model_len"] > 0
    assert http.post("/v1/detokenize", json={"tokens": tok["tokens"]}).json()["text"] == "hello world"


def test_info_and_control_endpoints(http: httpx.Client, http_server: Any) -> None:
    info = http.get("/get_model_info").json()
    assert info["is_generation"] is True and "model_path" in info and "tokenizer_path" in info
    server_info = http.get("/get_server_info").json()
    assert server_info["max_total_num_tokens"] > 0
    assert httpx.get(f"{http_server.base_url}/health").status_code == 200
    assert httpx.get(f"{http_server.base_url}/health_generate", timeout=120).status_code == 200
    assert http.post("/flush_cache").status_code == 200
    assert http.post("/abort_request", json={"rid": "no-such-request"}).status_code == 200
