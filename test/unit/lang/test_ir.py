"""Expression building: composition, gen/select arguments, sampling defaults."""

import pytest

import radixlm as rl
from radixlm.lang.ir import (
    DEFAULT_SAMPLING, SglConstantText, SglExprList, SglGen, SglRoleBegin, SglRoleEnd,
    SglSamplingParams, SglSelect, is_generation,
)


def test_concat_flattens_and_wraps_strings() -> None:
    expr = "Q: " + rl.gen("a", stop="\n") + "!" + rl.select("b", choices=["x", "y"])
    assert isinstance(expr, SglExprList)
    kinds = [type(e) for e in expr.exprs]
    assert kinds == [SglConstantText, SglGen, SglConstantText, SglSelect]
    assert is_generation(expr) and not is_generation("a" + SglConstantText("b"))


def test_roles_wrap_their_content() -> None:
    expr = rl.user("hi " + rl.gen("g"))
    assert isinstance(expr.exprs[0], SglRoleBegin) and expr.exprs[0].role == "user"
    assert isinstance(expr.exprs[-1], SglRoleEnd) and expr.exprs[-1].role == "user"
    assert [type(e) for e in rl.assistant().exprs] == [SglRoleBegin, SglRoleEnd]
    assert rl.system_begin().role == "system" and rl.assistant_end().role == "assistant"


def test_gen_with_choices_is_select() -> None:
    expr = rl.gen("c", choices=["a", "b"], choices_method=rl.greedy_token_selection)
    assert isinstance(expr, SglSelect) and expr.choices == ["a", "b"]
    assert expr.choices_method is rl.greedy_token_selection
    assert rl.select("c", choices=["a"]).choices_method is rl.token_length_normalized


def test_select_rejects_bad_choices() -> None:
    with pytest.raises(ValueError):
        rl.select("c", choices=[])
    with pytest.raises(TypeError):
        rl.select("c", choices=["a", 1])
    with pytest.raises(ValueError, match="regex"):
        rl.gen("x", regex="a+", json_schema={"type": "string"})


def test_gen_sampling_params_merge_over_run_defaults() -> None:
    g = rl.gen("x", max_tokens=7, stop=["\n", "."], temperature=0, json_schema={"type": "integer"})
    merged = g.sampling_params.merged_over(DEFAULT_SAMPLING)
    kw = merged.to_srt_kwargs()
    assert kw["max_new_tokens"] == 7 and kw["stop"] == ["\n", "."] and kw["temperature"] == 0
    assert kw["top_p"] == 1.0 and kw["json_schema"] == '{"type": "integer"}'
    assert "regex" not in kw


def test_empty_stop_is_omitted_and_single_stop_is_listed() -> None:
    assert "stop" not in SglSamplingParams(stop=()).to_srt_kwargs()
    assert SglSamplingParams(stop="\n").to_srt_kwargs()["stop"] == ["\n"]


def test_appending_a_non_expression_fails_clearly() -> None:
    with pytest.raises(TypeError, match="str or an expression"):
        "a" + rl.gen("x") + 3
