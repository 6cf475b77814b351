"""20 JSON schemas driven to termination in ONE batch; every output validates (jsonschema)."""

from __future__ import annotations

import json

import jsonschema
import pytest
import torch
from grammar_driver import STOP_TOKEN_IDS, VOCAB_SIZE, closing_token_ids, decode, drive, ready
from transformers import PreTrainedTokenizerBase

from radixlm.constrained import GrammarBackend, response_format_to_json_schema

INT = {"type": "integer"}
STR = {"type": "string", "maxLength": 12}


def obj(props: dict, required: list[str] | None = None) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required}


SCHEMAS: list[dict] = [
    obj({"name": STR, "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    obj({"color": {"enum": ["red", "green", "blue"]}}),
    obj({"ok": {"type": "boolean"}, "note": {"type": ["string", "null"], "maxLength": 8}}),
    obj({"tags": {"type": "array", "items": STR, "minItems": 1, "maxItems": 4}}),
    obj({"user": obj({"id": INT, "profile": obj({"email": STR, "verified": {"type": "boolean"}})})}),
    obj({"scores": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5}, "maxItems": 6}}),
    obj({"a": INT, "b": STR, "c": {"type": "number"}}, required=["a"]),
    obj({"points": {"type": "array", "maxItems": 3, "items": obj({"x": INT, "y": INT})}}),
    obj({"status": {"const": "done"}, "code": {"type": "integer", "minimum": 200, "maximum": 599}}),
    obj({"level": {"enum": [1, 2, 3, "max"]}, "active": {"type": "boolean"}}),
    obj({"value": {"anyOf": [{"type": "integer", "minimum": 0, "maximum": 9}, {"enum": ["none"]}]}}),
    {"type": "array", "items": {"enum": ["a", "b", "c"]}, "minItems": 2, "maxItems": 5},
    obj({"matrix": {"type": "array", "maxItems": 3, "items": {"type": "array", "maxItems": 3, "items": INT}}}),
    obj({"id": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}}),
    obj({"meta": obj({"version": {"type": "integer", "minimum": 1, "maximum": 3}, "flags": obj({"x": {"type": "boolean"}})})}),
    obj({"items": {"type": "array", "minItems": 1, "maxItems": 2, "items": obj({"sku": STR, "qty": {"type": "integer", "minimum": 1, "maximum": 99}})}}),
    obj({"first": STR, "last": STR, "middle": STR}, required=["first", "last"]),
    {"type": "integer", "minimum": 10, "maximum": 20},
    obj({"kind": {"enum": ["cat", "dog"]}, "legs": {"type": "integer", "minimum": 0, "maximum": 4}, "name": STR}),
    obj({"ratio": {"type": "number", "minimum": 0, "maximum": 1}, "unit": {"enum": ["%", "frac"]}}),
]


@pytest.fixture(scope="module")
def closers(tokenizer: PreTrainedTokenizerBase) -> torch.Tensor:
    return closing_token_ids(tokenizer, STOP_TOKEN_IDS)


def test_twenty_schemas_validate(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase, closers: torch.Tensor) -> None:
    assert len(SCHEMAS) == 20
    keys = [("json", json.dumps(s)) for s in SCHEMAS]
    for key in keys:  # all compile concurrently on the pool
        backend.get_future(key)
    grammars = [ready(backend, k) for k in keys]
    for seed in (0, 1):
        outputs = drive([g.copy() for g in grammars], VOCAB_SIZE, closers, seed=seed)
        for schema, tokens in zip(SCHEMAS, outputs):
            text = decode(tokenizer, tokens, STOP_TOKEN_IDS)
            jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("response_format, schema", [
    ({"type": "json_object"}, None),
    ({"type": "json_schema", "json_schema": {"name": "pet", "schema": SCHEMAS[18], "strict": True}}, SCHEMAS[18]),
])
def test_response_format(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase, closers: torch.Tensor,
                         response_format: dict, schema: dict | None) -> None:
    text = response_format_to_json_schema(response_format)
    outputs = drive([ready(backend, ("json", text)) for _ in range(4)], VOCAB_SIZE, closers, seed=7)
    for tokens in outputs:
        value = json.loads(decode(tokenizer, tokens, STOP_TOKEN_IDS))
        if schema is not None:
            jsonschema.validate(value, schema)


def test_response_format_mapping() -> None:
    assert response_format_to_json_schema({"type": "text"}) is None
    assert response_format_to_json_schema(None) is None
    with pytest.raises(ValueError, match="response_format"):
        response_format_to_json_schema({"type": "xml"})
    with pytest.raises(ValueError, match="response_format"):
        response_format_to_json_schema({"type": "json_schema", "json_schema": {"name": "x", "schema": 3}})
