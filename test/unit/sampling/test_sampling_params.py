"""SamplingParams: SGLang names, unknown keys rejected, every bad value named in the error."""

from __future__ import annotations

import pytest

from radixlm.sampling.sampling_params import SamplingParams


def test_defaults_follow_sglang() -> None:
    p = SamplingParams()
    assert p.max_new_tokens == 128 and p.temperature == 1.0 and p.top_p == 1.0 and p.top_k == -1
    assert p.n == 1 and p.ignore_eos is False and p.skip_special_tokens is True


def test_unknown_key_is_named() -> None:
    with pytest.raises(ValueError, match="max_tokens"):
        SamplingParams.from_dict({"max_tokens": 3})


@pytest.mark.parametrize("params,name", [
    ({"max_new_tokens": -1}, "max_new_tokens"),
    ({"top_p": 0.0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"temperature": -0.1}, "temperature"),
    ({"top_k": 0}, "top_k"),
    ({"min_p": 2.0}, "min_p"),
    ({"frequency_penalty": 3.0}, "frequency_penalty"),
    ({"presence_penalty": -3.0}, "presence_penalty"),
    ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"n": 0}, "n"),
    ({"stop": 5}, "stop"),
    ({"stop_token_ids": [10**9]}, "stop_token_ids"),
    ({"max_new_tokens": "8"}, "max_new_tokens"),
    ({"ignore_eos": 1}, "ignore_eos"),
    ({"logit_bias": {"abc": 1.0}}, "logit_bias"),
    ({"logit_bias": {"49152": 1.0}}, "logit_bias"),
    ({"logit_bias": {"-3": 1.0}}, "logit_bias"),
    ({"logit_bias": {"5": 100.5}}, "logit_bias"),
    ({"logit_bias": {"5": float("nan")}}, "logit_bias"),
    ({"logit_bias": [5, 1.0]}, "logit_bias"),
])
def test_invalid_values_name_the_parameter(params: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        SamplingParams.from_dict(params).verify(vocab_size=49152)


def test_normalize_folds_greedy_and_stop() -> None:
    p = SamplingParams.from_dict({"temperature": 0, "stop": "\n"}).normalize()
    assert p.temperature == 0.0 and p.top_k == 1 and p.stop == ("\n",)
    assert SamplingParams.from_dict({"top_k": 1}).normalize().temperature == 0.0
    assert SamplingParams.from_dict({"stop": ["a", ""]}).stop_strs == ("a",)


def test_normalize_turns_logit_bias_keys_into_token_ids() -> None:
    p = SamplingParams.from_dict({"logit_bias": {"42": 5, 7: -100}})
    p.verify(vocab_size=49152)
    assert p.normalize().logit_bias == {42: 5.0, 7: -100.0}
    assert SamplingParams.from_dict({"logit_bias": {}}).normalize().logit_bias is None
