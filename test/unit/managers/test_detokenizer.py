"""Incremental detokenization on the real SmolLM2 tokenizer: never half a UTF-8 character,
increments add up to the full decode, stop strings held back and trimmed."""

from __future__ import annotations

import pytest

from radixlm.managers.detokenizer_manager import IncrementalDetokenizer, _stop_prefix_holdback


@pytest.fixture(scope="module")
def tokenizer(smollm2_dir: str):
    from radixlm.model_loader.tokenizer import get_tokenizer

    return get_tokenizer(smollm2_dir)


def _stream(detok: IncrementalDetokenizer, ids: list[int], finish: dict, **kw) -> list[str]:
    pieces = [detok.step("r", [t], None, **kw) for t in ids[:-1]]
    pieces.append(detok.step("r", [ids[-1]], finish, **kw))
    return pieces


@pytest.mark.parametrize("text", ["Hello world, how are you?", "café 日本語 🤖 ok", "a  b\n\n  c", "🎉🎉🎉"])
def test_increments_sum_to_full_decode(tokenizer, text: str) -> None:
    ids = tokenizer.encode(text)
    pieces = _stream(IncrementalDetokenizer(tokenizer), ids, {"type": "length", "length": len(ids)})
    assert "".join(pieces) == tokenizer.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_multibyte_character_held_back(tokenizer) -> None:
    ids = tokenizer.encode("🤖")
    assert len(ids) > 1, "the emoji should span several byte tokens"
    detok = IncrementalDetokenizer(tokenizer)
    assert detok.step("r", ids[:1], None) == ""
    assert "".join(detok.step("r", [t], None) for t in ids[1:]) == "🤖"


def test_stop_string_trimmed_and_never_streamed(tokenizer) -> None:
    ids = tokenizer.encode("The answer is 42. STOP here")
    stop_at = next(i for i in range(len(ids)) if "STOP" in tokenizer.decode(ids[:i + 1]))
    ids = ids[:stop_at + 1]
    kw = dict(stop_strs=("STOP",))
    pieces = _stream(IncrementalDetokenizer(tokenizer), ids, {"type": "stop", "matched": "STOP"}, **kw)
    assert "".join(pieces) == "The answer is 42. "
    pieces = _stream(IncrementalDetokenizer(tokenizer), ids, {"type": "stop", "matched": "STOP"},
                     no_stop_trim=True, **kw)
    assert "".join(pieces).endswith("STOP")


def test_stop_token_trimmed_and_special_tokens_skipped(tokenizer) -> None:
    eos = tokenizer.eos_token_id
    ids = tokenizer.encode("Hi there") + [eos]
    pieces = _stream(IncrementalDetokenizer(tokenizer), ids, {"type": "stop", "matched": eos})
    assert "".join(pieces) == "Hi there"
    pieces = _stream(IncrementalDetokenizer(tokenizer), ids, {"type": "length", "length": 3},
                     skip_special_tokens=False)
    assert "".join(pieces) == "Hi there" + tokenizer.eos_token


def test_holdback() -> None:
    assert _stop_prefix_holdback("abc ST", ("STOP",)) == 2
    assert _stop_prefix_holdback("abc", ("STOP",)) == 0
    assert _stop_prefix_holdback("x\n", ("\n\n", "zz")) == 1
