"""Structured output (issue 8) on a real server with SmolLM2: JSON schema, regex and EBNF
through `/generate`, `/v1/chat/completions` and `/v1/completions` (`response_format`)."""

from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

try:
    import httpx
except ImportError:  # some openai builds vendor it as httpx2 (same API)
    import httpx2 as httpx
import jsonschema
import pytest

pytestmark = pytest.mark.slow

MAX_NEW = 96
NAME = {"type": "string", "minLength": 1, "maxLength": 12}
SCHEMAS: list[dict] = [
    {"type": "object", "properties": {"name": NAME, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {
        "address": {"type": "object", "properties": {"city": NAME, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"]},
        "tags": {"type": "array", "items": {"enum": ["home", "work", "other"]}, "minItems": 1, "maxItems": 3}},
     "required": ["address", "tags"]},
    {"type": "object", "properties": {"color": {"enum": ["red", "green", "blue"]}, "size": {"enum": ["S", "M", "L"]},
                                      "in_stock": {"type": "boolean"}},
     "required": ["color", "size", "in_stock"]},
    {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 9999},
        "items": {"type": "array", "maxItems": 2, "items": {
            "type": "object", "properties": {"sku": {"type": "string", "maxLength": 6},
                                             "qty": {"type": "integer", "minimum": 1, "maximum": 9}},
            "required": ["sku", "qty"]}}},
     "required": ["id", "items"]},
    {"type": "object", "properties": {
        "city": NAME, "temp_c": {"type": "integer", "minimum": -50, "maximum": 60},
        "conditions": {"enum": ["sunny", "cloudy", "rain", "snow"]},
        "forecast": {"type": "array", "items": {"type": "integer", "minimum": -50, "maximum": 60}, "maxItems": 3}},
     "required": ["city", "temp_c", "conditions"]},
]
TOPICS = ["a person", "an address with tags", "a product", "an order", "the weather in Paris"]
PROMPTS = [f"Write {topic} as JSON{suffix}" for topic in TOPICS
           for suffix in (":", ". Be brief:", " for a test:", " (an example):")]  # 20 = 5 schemas x 4

IPV4 = r"((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
DATE = r"(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
ARITH_EBNF = r'''
root ::= expr
expr ::= term | term op term | term op term op term
term ::= num | "(" num op num ")"
op ::= " + " | " - " | " * "
num ::= [1-9] | [1-9] [0-9]
'''
NUM = r"[1-9][0-9]?"
OP = r" [-+*] "
TERM = rf"({NUM}|\({NUM}{OP}{NUM}\))"
ARITH_RE = rf"{TERM}({OP}{TERM}){{0,2}}"
GREEDY = {"temperature": 0.0, "max_new_tokens": MAX_NEW}


@pytest.fixture(scope="module")
def http(http_server: Any) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {http_server.api_key}"}
    with httpx.Client(base_url=http_server.base_url, headers=headers, timeout=300) as c:
        yield c


def generate(http: httpx.Client, text: Any, params: Any) -> Any:
    r = http.post("/generate", json={"text": text, "sampling_params": params})
    assert r.status_code == 200, r.text
    return r.json()


def assert_valid_json(text: str, schema: dict) -> None:
    jsonschema.validate(json.loads(text), schema)


def test_json_schema_generate(http: httpx.Client) -> None:
    """20 schema-constrained requests in one batch: every output parses and validates."""
    params = [{**GREEDY, "json_schema": json.dumps(SCHEMAS[i // 4])} for i in range(len(PROMPTS))]
    outs = generate(http, PROMPTS, params)
    for i, out in enumerate(outs):
        assert out["meta_info"]["finish_reason"]["type"] == "stop", out
        assert_valid_json(out["text"], SCHEMAS[i // 4])


def test_json_schema_chat_response_format(http: httpx.Client) -> None:
    def chat(i: int) -> dict:
        body = {"model": "default", "messages": [{"role": "user", "content": PROMPTS[i]}], "max_tokens": MAX_NEW,
                "temperature": 0, "response_format": {"type": "json_schema", "json_schema": {
                    "name": f"schema{i // 4}", "schema": SCHEMAS[i // 4], "strict": True}}}
        r = http.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        return r.json()

    with ThreadPoolExecutor(len(PROMPTS)) as pool:  # all at once: one batch, not three waves
        responses = list(pool.map(chat, range(len(PROMPTS))))
    for i, resp in enumerate(responses):
        choice = resp["choices"][0]
        assert choice["finish_reason"] == "stop", choice
        assert_valid_json(choice["message"]["content"], SCHEMAS[i // 4])


def test_completions_response_format(http: httpx.Client) -> None:
    body = {"model": "default", "prompt": PROMPTS[8], "max_tokens": MAX_NEW, "temperature": 0,
            "response_format": {"type": "json_schema", "json_schema": {"name": "product", "schema": SCHEMAS[2]}}}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert_valid_json(choice["text"], SCHEMAS[2])


def test_json_object_is_json_so_far(http: httpx.Client) -> None:
    """`json_object` is any JSON value: a small model may not close it within max_tokens, so
    check what it wrote parses once closed (a prefix of a JSON object)."""
    body = {"model": "default", "messages": [{"role": "user", "content": "Give a JSON object with a name and age."}],
            "max_tokens": 48, "temperature": 0, "response_format": {"type": "json_object"}}
    r = http.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    text = r.json()["choices"][0]["message"]["content"]
    assert text.lstrip().startswith(("{", "[")), text
    if r.json()["choices"][0]["finish_reason"] == "stop":
        json.loads(text)


@pytest.mark.parametrize("kind, grammar, pattern, prompt", [
    ("regex", IPV4, IPV4, "The server's IP address is "),
    ("regex", DATE, DATE, "The Apollo 11 landing date (YYYY-MM-DD) was "),
    ("ebnf", ARITH_EBNF, ARITH_RE, "An arithmetic expression: "),
])
def test_regex_and_ebnf_match_in_full(http: httpx.Client, kind: str, grammar: str, pattern: str, prompt: str) -> None:
    out = generate(http, prompt, {**GREEDY, kind: grammar})
    assert out["meta_info"]["finish_reason"]["type"] == "stop"
    assert re.fullmatch(pattern, out["text"]), out["text"]


def test_regex_stream_and_stop_string(http: httpx.Client) -> None:
    body = {"text": "Today's date is ", "sampling_params": {**GREEDY, "regex": DATE}, "stream": True}
    with http.stream("POST", "/generate", json=body) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and len(events) > 2
    final = json.loads(events[-2])
    assert re.fullmatch(DATE, final["text"]) and final["meta_info"]["finish_reason"]["type"] == "stop"
    out = generate(http, "Today's date is ", {**GREEDY, "regex": DATE, "stop": "-"})
    assert out["meta_info"]["finish_reason"] == {"type": "stop", "matched": "-"}
    assert re.fullmatch(r"(19|20)[0-9]{2}", out["text"]), out["text"]


@pytest.mark.parametrize("path, body, fragment", [
    ("/generate", {"text": "x", "sampling_params": {"json_schema": '{"type": "nope"}'}}, "invalid json_schema"),
    ("/generate", {"text": "x", "sampling_params": {"json_schema": "{not json"}}, "invalid json_schema"),
    ("/generate", {"text": "x", "sampling_params": {"regex": "(ab"}}, "invalid regex: Regex parsing error"),
    ("/generate", {"text": "x", "sampling_params": {"ebnf": "root ::= missing"}}, "invalid ebnf"),
    ("/v1/chat/completions", {"model": "default", "messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "json_schema", "json_schema": {
                                  "name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}}}},
     "invalid response_format"),
])
def test_invalid_grammar_is_400_and_server_keeps_serving(http: httpx.Client, path: str, body: dict,
                                                         fragment: str) -> None:
    r = http.post(path, json=body)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["message"]
    assert generate(http, "Hello", {**GREEDY, "max_new_tokens": 4})["meta_info"]["completion_tokens"] == 4


def test_mixed_batch_leaves_unconstrained_outputs_unchanged(http: httpx.Client) -> None:
    plain = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]
    short = {**GREEDY, "max_new_tokens": 48}
    alone = [o["output_ids"] for o in generate(http, plain, short)]
    constrained = [{**GREEDY, "json_schema": json.dumps(SCHEMAS[0])}, {**GREEDY, "regex": IPV4},
                   {**GREEDY, "ebnf": ARITH_EBNF}]
    mixed = generate(http, [p for pair in zip(plain, PROMPTS[:3]) for p in pair],
                     [q for pair in zip([short] * 3, constrained) for q in pair])
    assert [o["output_ids"] for o in mixed[0::2]] == alone
    assert_valid_json(mixed[1]["text"], SCHEMAS[0])
    assert re.fullmatch(IPV4, mixed[3]["text"]) and re.fullmatch(ARITH_RE, mixed[5]["text"])


def test_n2_schema_gives_two_valid_outputs(http: httpx.Client) -> None:
    params = {"max_new_tokens": MAX_NEW, "temperature": 0.8, "seed": 7, "n": 2, "json_schema": json.dumps(SCHEMAS[2])}
    outs = generate(http, PROMPTS[8], params)
    assert len(outs) == 2
    for out in outs:
        assert out["meta_info"]["finish_reason"]["type"] == "stop"
        assert_valid_json(out["text"], SCHEMAS[2])
