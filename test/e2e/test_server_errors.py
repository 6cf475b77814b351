"""Every error case of the HTTP API returns its status and the OpenAI error body; failures and
disconnects leak nothing (a real server, real model)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Iterator, Optional, Union

try:
    import httpx
except ImportError:  # some openai builds vendor it as httpx2 (same API)
    import httpx2 as httpx
import pytest

pytestmark = pytest.mark.slow

ERROR_KEYS = {"object", "message", "type", "param", "code"}
ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
               503: "ServiceUnavailableError"}
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
MSG = [{"role": "user", "content": "Hi"}]
MAX_QUEUED_REQUESTS = 20  # the session server's --max-queued-requests (test/e2e/conftest.py)
LONG_TEXT = "hello " * 9000  # > the 8192-token context of SmolLM2

# (path, JSON body or raw bytes, status, a fragment of the message)
CASES: list[tuple[str, Union[dict, bytes], int, str]] = [
    (CHAT, b"{not json", 400, "Malformed JSON"),
    (COMP, b"[1, 2]", 400, "JSON object"),
    (CHAT, {"model": "default"}, 400, "messages"),
    (CHAT, {"model": "default", "messages": []}, 400, "messages"),
    (CHAT, {"model": "default", "messages": [{"role": "wizard", "content": "x"}]}, 400, "role"),
    (CHAT, {"model": "default", "messages": [{"role": "user", "content": [{"type": "image_url",
                                                                           "image_url": {"url": "x"}}]}]},
     400, "type 'image_url' are not supported"),
    (COMP, {"model": "default"}, 400, "prompt"),
    (COMP, {"prompt": "x"}, 400, "model"),
    (COMP, {"model": "default", "prompt": "x", "temperature": "hot"}, 400, "temperature"),
    (COMP, {"model": "default", "prompt": "x", "temperature": -1}, 400, "temperature"),
    (COMP, {"model": "default", "prompt": "x", "top_p": 1.5}, 400, "top_p"),
    (COMP, {"model": "default", "prompt": "x", "n": 0}, 400, "n"),
    (COMP, {"model": "default", "prompt": "x", "max_tokens": -1}, 400, "max_tokens"),
    (COMP, {"model": "default", "prompt": "x", "presence_penalty": 3}, 400, "presence_penalty"),
    (COMP, {"model": "default", "prompt": "x", "repetition_penalty": 0}, 400, "repetition_penalty"),
    (COMP, {"model": "default", "prompt": "x", "stop_token_ids": [-1]}, 400, "stop_token_ids"),
    (COMP, {"model": "default", "prompt": "x", "seed": "abc"}, 400, "seed"),
    (COMP, {"model": "default", "prompt": "x", "logprobs": 50}, 400, "logprobs"),
    (COMP, {"model": "default", "prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias"),
    (CHAT, {"model": "default", "messages": MSG, "logit_bias": {"5": 500}}, 400, "logit_bias"),
    (COMP, {"model": "default", "prompt": ""}, 400, "prompt"),
    (COMP, {"model": "default", "prompt": [10 ** 7]}, 400, "prompt"),
    (CHAT, {"model": "default", "messages": MSG, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "nope"}}}}, 400, "invalid response_format"),
    (CHAT, {"model": "default", "messages": MSG, "top_logprobs": 2}, 400, "top_logprobs"),
    (CHAT, {"model": "default", "messages": MSG, "continue_final_message": True}, 400, "continue_final_message"),
    (CHAT, {"model": "default", "messages": MSG, "max_tokens": 9000}, 400, "8192"),
    (COMP, {"model": "default", "prompt": LONG_TEXT, "max_tokens": 1}, 400, "8192"),
    (CHAT, {"model": "default", "messages": [{"role": "user", "content": LONG_TEXT}]}, 400, "8192"),
    (CHAT, {"model": "no-such-model", "messages": MSG}, 404, "no-such-model"),
    (COMP, {"model": "no-such-model", "prompt": "x"}, 404, "no-such-model"),
    ("/generate", b"{", 400, "Malformed JSON"),
    ("/generate", {"text": "x", "bogus": 1}, 400, "bogus"),
    ("/generate", {"sampling_params": {"max_new_tokens": 1}}, 400, "text"),
    ("/generate", {"text": "x", "sampling_params": {"temperatur": 1}}, 400, "temperatur"),
    ("/generate", {"text": "x", "sampling_params": {"logit_bias": {"99999999": 1}}}, 400, "logit_bias"),
    ("/abort_request", {}, 400, "rid"),
    ("/v1/detokenize", {"tokens": [10 ** 7]}, 400, "tokens"),
]


@pytest.fixture(scope="module")
def http(http_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {http_server.api_key}"}
    with httpx.Client(base_url=http_server.base_url, headers=headers, timeout=300) as c:
        yield c


def post(http: httpx.Client, path: str, body: Union[dict, bytes]) -> httpx.Response:
    if isinstance(body, bytes):
        return http.post(path, content=body, headers={"Content-Type": "application/json"})
    return http.post(path, json=body)


def assert_error(response: httpx.Response, status: int, fragment: Optional[str] = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == ERROR_KEYS and body["object"] == "error", body
    assert body["code"] == status and body["type"] == ERROR_TYPES[status], body
    if fragment is not None:
        assert fragment in body["message"] or fragment == body["param"], body
    return body


@pytest.mark.parametrize("path,body,status,fragment", CASES,
                         ids=[f"{i}-{c[0].rsplit('/', 1)[-1]}-{c[2]}" for i, c in enumerate(CASES)])
def test_error_case(http: httpx.Client, path: str, body: Union[dict, bytes], status: int, fragment: str) -> None:
    assert_error(post(http, path, body), status, fragment)


def test_context_error_states_both_lengths(http: httpx.Client) -> None:
    body = assert_error(post(http, CHAT, {"model": "default", "messages": [{"role": "user", "content": LONG_TEXT}]}),
                        400)
    numbers = {int(w) for w in body["message"].replace("(", " ").replace(")", " ").split() if w.isdigit()}
    assert 8192 in numbers and any(n > 9000 for n in numbers), body["message"]


def test_unknown_model_route_is_404(http: httpx.Client) -> None:
    assert_error(http.get("/v1/models/no-such-model"), 404)


def test_api_key(http_server: Any) -> None:
    url = http_server.base_url
    assert_error(httpx.post(f"{url}{COMP}", json={"model": "default", "prompt": "x"}), 401)
    wrong = {"Authorization": "Bearer wrong"}
    assert_error(httpx.post(f"{url}{COMP}", json={"model": "default", "prompt": "x"}, headers=wrong), 401)
    assert_error(httpx.get(f"{url}/get_server_info", headers=wrong), 401)
    assert httpx.get(f"{url}/health").status_code == 200
    assert httpx.get(f"{url}/metrics").status_code == 200


def wait_idle_without_leak(http: httpx.Client, timeout_s: float = 180.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        info = http.get("/get_server_info").json()
        idle = info["num_running_reqs"] == 0 and info["num_waiting_reqs"] == 0 and info["num_in_flight"] == 0
        if idle or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert idle, f"server did not become idle: {info}"
    assert info["memory_leak"] is False, info.get("memory_leak_message")
    assert info["available_tokens"] + info["evictable_tokens"] == info["max_total_num_tokens"], info
    return info


def test_100_malformed_requests_then_normal_request(http: httpx.Client) -> None:
    cheap = [c for c in CASES if c[2] == 400 and "8192" not in c[3]]
    for i in range(100):
        path, body, status, _ = cheap[i % len(cheap)]
        assert post(http, path, body).status_code == status
    ok = http.post(COMP, json={"model": "default", "prompt": "Hello", "max_tokens": 2})
    assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 2
    wait_idle_without_leak(http)


def test_flush_cache_refused_while_busy(http: httpx.Client) -> None:
    body = {"model": "default", "prompt": "Tell a long story.", "max_tokens": 500, "ignore_eos": True,
            "stream": True}
    with http.stream("POST", COMP, json=body) as response:
        next(line for line in response.iter_lines() if line.startswith("data: "))
        assert_error(http.post("/flush_cache"), 400)
    wait_idle_without_leak(http)
    assert http.post("/flush_cache").status_code == 200


async def open_streams(http_server: Any, count: int) -> None:
    """`count` long chat streams, each read to its first chunk, then a request past the queue
    limit (503), then every client disconnects mid-stream."""
    headers = {"Authorization": f"Bearer {http_server.api_key}"}
    async with httpx.AsyncClient(base_url=http_server.base_url, headers=headers, timeout=300) as client:
        async def start(i: int) -> tuple[httpx.Response, Any]:
            body = {"model": "default", "messages": [{"role": "user", "content": f"Story number {i}, please."}],
                    "max_tokens": 2000, "ignore_eos": True, "stream": True}
            response = await client.send(client.build_request("POST", CHAT, json=body), stream=True)
            assert response.status_code == 200
            lines = response.aiter_lines()  # kept alive: collecting it would close the connection early
            while not (await lines.__anext__()).startswith("data: "):
                pass
            return response, lines

        streams = await asyncio.gather(*(start(i) for i in range(count)))
        info = (await client.get("/get_server_info")).json()
        assert info["num_in_flight"] == count, info
        over = await client.post(COMP, json={"model": "default", "prompt": "x", "max_tokens": 1})
        assert_error(over, 503, "max-queued-requests")
        for response, lines in streams:
            await lines.aclose()
            await response.aclose()


def test_queue_limit_and_disconnects_free_every_slot(http: httpx.Client, http_server: Any) -> None:
    asyncio.run(open_streams(http_server, MAX_QUEUED_REQUESTS))
    info = wait_idle_without_leak(http, timeout_s=120)
    assert info["num_aborted"] >= MAX_QUEUED_REQUESTS
    ok = http.post(CHAT, json={"model": "default", "messages": MSG, "max_tokens": 2})
    assert ok.status_code == 200
