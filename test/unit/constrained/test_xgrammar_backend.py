"""The backend's contract: cache, non-blocking futures, errors that name the parameter, copy, rollback."""

from __future__ import annotations

import json
import time

import pytest
import torch
from grammar_driver import STOP_TOKEN_IDS, VOCAB_SIZE, ready
from transformers import PreTrainedTokenizerBase

from radixlm.constrained import (
    ANY_JSON, GrammarBackend, GrammarError, allocate_vocab_mask, bitmask_to_bool_mask, create_grammar_backend,
    grammar_key, response_format_to_json_schema, validate_grammar_request, validate_sampling_params_grammar,
)
from radixlm.sampling.sampling_params import SamplingParams

SLOW_REGEX = "[a-z]{1,1500}"  # ~1 s to compile on this machine
SCHEMA = json.dumps({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["n"]})


def allowed(grammar: object, vocab_size: int = VOCAB_SIZE) -> torch.Tensor:
    bitmask = allocate_vocab_mask(vocab_size, 1)
    grammar.fill_vocab_mask(bitmask, 0)
    return bitmask_to_bool_mask(bitmask, vocab_size)[0]


def accept_text(grammar: object, tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    tokens = tokenizer.encode(text, add_special_tokens=False)
    for token in tokens:
        grammar.accept_token(token)
    return tokens


# ---- errors --------------------------------------------------------------------------
@pytest.mark.parametrize("kind, text, param, quoted", [
    ("json", '{"type": "objectx"}', "json_schema", 'Unsupported type "objectx"'),
    ("json", '{"type": ', "json_schema", "not valid JSON"),
    ("json", "[1, 2]", "json_schema", "must be an object"),
    ("regex", "(ab", "regex", "parenthesis is not closed"),
    ("ebnf", "root ::= foo", "ebnf", 'Rule "foo" is not defined'),
])
def test_invalid_grammar_names_param_and_quotes_error(backend: GrammarBackend, kind: str, text: str,
                                                      param: str, quoted: str) -> None:
    with pytest.raises(ValueError, match=param) as early:
        validate_grammar_request(kind, text)
    assert quoted in str(early.value) and str(early.value).startswith(f"invalid {param}: ")
    backend.get_future((kind, text)).exception(timeout=30)
    late = backend.poll_ready((kind, text))
    assert isinstance(late, GrammarError) and late.param == param and quoted in str(late)


def test_response_format_errors_name_response_format() -> None:
    text = response_format_to_json_schema({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}})
    with pytest.raises(ValueError, match=r"^invalid response_format: .*nope"):
        validate_grammar_request("json", text, param="response_format")
    validate_grammar_request("json", ANY_JSON, param="response_format")


def test_sampling_params_key() -> None:
    assert grammar_key(SamplingParams()) is None
    assert grammar_key(SamplingParams(regex="a+")) == ("regex", "a+")
    assert validate_sampling_params_grammar(SamplingParams(json_schema=SCHEMA)) == ("json", SCHEMA)
    with pytest.raises(ValueError, match="ebnf"):
        validate_sampling_params_grammar(SamplingParams(ebnf="root ::= "))


def test_none_backend_rejects() -> None:
    none = create_grammar_backend("none", None, VOCAB_SIZE)
    with pytest.raises(ValueError, match="disabled"):
        validate_grammar_request("regex", "a+", backend="none")
    none.get_future(("regex", "a+")).exception(timeout=10)
    err = none.poll_ready(("regex", "a+"))
    assert isinstance(err, GrammarError) and "disabled" in str(err)
    with pytest.raises(ValueError, match="unknown grammar backend"):
        create_grammar_backend("outlines", None, VOCAB_SIZE)


# ---- cache and futures ---------------------------------------------------------------
def test_cache_hit_returns_same_compiled_grammar(backend: GrammarBackend) -> None:
    key = ("json", SCHEMA)
    assert backend.get_future(key) is backend.get_future(key)
    first = backend.get_compiled(key, timeout=30)
    assert backend.get_compiled(key) is first
    a, b = backend.poll_ready(key), backend.poll_ready(key)
    assert a is not b and a.matcher is not b.matcher  # one compiled grammar, one matcher per request


def test_futures_do_not_block(tokenizer: PreTrainedTokenizerBase) -> None:
    backend = create_grammar_backend("xgrammar", tokenizer, VOCAB_SIZE, num_threads=2, compile_timeout_s=30)
    try:
        ready(backend, ("regex", "[0-9]+"))
        start = time.monotonic()
        backend.get_future(("regex", SLOW_REGEX))
        assert backend.poll_ready(("regex", SLOW_REGEX)) is None  # still compiling: the request waits
        assert backend.poll_ready(("regex", "[0-9]+")) is not None  # others proceed
        assert time.monotonic() - start < 0.5
        backend.get_compiled(("regex", SLOW_REGEX), timeout=60)
        assert backend.poll_ready(("regex", SLOW_REGEX)) is not None
    finally:
        backend.shutdown()


def test_compile_timeout_is_an_error(tokenizer: PreTrainedTokenizerBase) -> None:
    backend = create_grammar_backend("xgrammar", tokenizer, VOCAB_SIZE, compile_timeout_s=0.05)
    try:
        backend.get_future(("regex", SLOW_REGEX + "x"))
        time.sleep(0.1)
        err = backend.poll_ready(("regex", SLOW_REGEX + "x"))
        assert isinstance(err, GrammarError) and "timed out" in str(err) and err.param == "regex"
    finally:
        backend.shutdown()


# ---- matcher state ---------------------------------------------------------------------
def test_illegal_token_raises(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase) -> None:
    grammar = ready(backend, ("regex", "[0-9]+"))
    with pytest.raises(ValueError, match="not allowed"):
        grammar.accept_token(tokenizer.encode("x", add_special_tokens=False)[0])
    accept_text(grammar, tokenizer, "42")
    grammar.accept_token(STOP_TOKEN_IDS[0])
    assert grammar.is_terminated()
    with pytest.raises(ValueError, match="after termination"):
        grammar.accept_token(tokenizer.encode("1", add_special_tokens=False)[0])
    mask = allowed(grammar)  # a terminated row allows only the stop token
    assert mask.nonzero().flatten().tolist() == STOP_TOKEN_IDS


def test_copy_gives_independent_states(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase) -> None:
    parent = ready(backend, ("json", SCHEMA))
    accept_text(parent, tokenizer, '{"n": ')
    a, b = parent.copy(), parent.copy()
    assert torch.equal(allowed(a), allowed(parent))
    accept_text(a, tokenizer, "7}")
    a.accept_token(STOP_TOKEN_IDS[0])
    assert a.is_terminated() and not b.is_terminated() and not parent.is_terminated()
    assert torch.equal(allowed(b), allowed(parent))
    accept_text(b, tokenizer, "99}")
    b.accept_token(STOP_TOKEN_IDS[0])
    assert b.is_terminated()


def test_rollback_restores_masks(backend: GrammarBackend, tokenizer: PreTrainedTokenizerBase) -> None:
    grammar = ready(backend, ("json", SCHEMA))
    masks = [allowed(grammar)]
    for token in tokenizer.encode('{"n": 12}', add_special_tokens=False):
        grammar.accept_token(token)
        masks.append(allowed(grammar))
    grammar.accept_token(STOP_TOKEN_IDS[0])
    assert grammar.is_terminated()
    grammar.rollback(1)  # undo the stop token (e.g. a retracted or speculative step)
    assert not grammar.is_terminated() and torch.equal(allowed(grammar), masks[-1])
    grammar.rollback(3)
    assert torch.equal(allowed(grammar), masks[-4])
    grammar.rollback(0)
    assert torch.equal(allowed(grammar), masks[-4])


def test_mask_covers_padded_model_vocab(tokenizer: PreTrainedTokenizerBase) -> None:
    padded = VOCAB_SIZE + 77  # model vocab larger than the tokenizer's
    backend = create_grammar_backend("xgrammar", tokenizer, padded, stop_token_ids=STOP_TOKEN_IDS)
    try:
        grammar = ready(backend, ("json", ANY_JSON))
        mask = allowed(grammar, padded)
        assert mask.shape == (padded,) and mask[:VOCAB_SIZE].any() and not mask[VOCAB_SIZE:].any()
    finally:
        backend.shutdown()
