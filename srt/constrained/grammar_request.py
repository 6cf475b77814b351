"""From request parameters to a `GrammarKey`, and the early (TokenizerManager-side) check.

Native requests carry `json_schema` / `regex` / `ebnf` in `sampling_params`; OpenAI requests
carry `response_format`, which maps onto `json_schema` (`{"type": "json_object"}` becomes
`json_schema = ANY_JSON`, i.e. any JSON value).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from radixlm.constrained.base import (
    ANY_JSON, GrammarError, GrammarKey, KIND_TO_PARAM, clean_error, get_grammar_backend_class,
)

_PARAM_TO_KIND = {param: kind for kind, param in KIND_TO_PARAM.items()}


def grammar_key(sampling_params: Any) -> Optional[GrammarKey]:
    """The key of a request's grammar (None = unconstrained); reads `json_schema`, `regex`,
    `ebnf` and, when present, `structural_tag` from a SamplingParams (or any such object)."""
    found = [(kind, getattr(sampling_params, param, None)) for param, kind in _PARAM_TO_KIND.items()]
    found = [(kind, text) for kind, text in found if text is not None]
    if len(found) > 1:
        raise ValueError("only one of json_schema, regex, ebnf, structural_tag may be set")
    if not found:
        return None
    kind, text = found[0]
    if kind == "json" and isinstance(text, dict):
        text = json.dumps(text)
    if not isinstance(text, str):
        raise ValueError(f"{KIND_TO_PARAM[kind]} must be a string, got {type(text).__name__}")
    return kind, text


def response_format_to_json_schema(response_format: Any) -> Optional[str]:
    """OpenAI `response_format` -> the native `json_schema` string (None for `{"type": "text"}`).

    Accepts a dict or a pydantic model; raises ValueError naming `response_format`.
    """
    if response_format is None:
        return None
    rf = response_format.model_dump() if hasattr(response_format, "model_dump") else response_format
    if not isinstance(rf, dict):
        raise ValueError(f"response_format must be an object, got {type(rf).__name__}")
    rf_type = rf.get("type")
    if rf_type == "text":
        return None
    if rf_type == "json_object":
        return ANY_JSON
    if rf_type != "json_schema":
        raise ValueError(f"response_format.type must be one of text, json_object, json_schema; got {rf_type!r}")
    spec = rf.get("json_schema")
    if not isinstance(spec, dict):
        raise ValueError("response_format.json_schema must be an object with a 'schema' field")
    schema = spec.get("schema", spec.get("schema_"))
    if schema is None:  # OpenAI lets `schema` be omitted: any JSON object
        return json.dumps({"type": "object"})
    if not isinstance(schema, (dict, bool)):
        raise ValueError(f"response_format.json_schema.schema must be an object, got {type(schema).__name__}")
    return json.dumps(schema)


def validate_grammar_request(kind: str, text: str, param: Optional[str] = None, backend: str = "xgrammar") -> None:
    """Raise GrammarError (a ValueError) naming `param` (default: the kind's parameter,
    e.g. json_schema) and quoting the backend's error if the grammar is invalid.

    Tokenizer-free and fast (a parse, no vocabulary compile): call it in the TokenizerManager
    to answer 400 before the request reaches the scheduler.
    """
    param = param or KIND_TO_PARAM.get(kind, kind)
    try:
        get_grammar_backend_class(backend).validate(kind, text)
    except GrammarError as err:
        raise GrammarError(param, err.message) from err
    except Exception as err:  # noqa: BLE001 - any failure to parse is the user's grammar
        raise GrammarError(param, clean_error(err)) from err


def validate_sampling_params_grammar(sampling_params: Any, backend: str = "xgrammar") -> Optional[GrammarKey]:
    """`grammar_key` + `validate_grammar_request` in one call; returns the key (None if unconstrained)."""
    key = grammar_key(sampling_params)
    if key is not None:
        validate_grammar_request(key[0], key[1], backend=backend)
    return key
