"""Constant-prefix tracing (used by run_batch), which also exercises role rendering."""

import dataclasses

import pytest

import radixlm as rl
from radixlm.lang.chat_template import get_chat_template
from radixlm.lang.state import ProgramState
from radixlm.lang.tracer import PrefixTracer, common_prefix, trace_constant_prefix

CHATML = get_chat_template("chatml")
LLAMA3 = get_chat_template("llama-3-instruct")


def few_shot(s, question):
    s += "Q: 1+1?\nA: 2\n\n"
    s += "Q: " + question + "\nA:" + rl.gen("answer", stop="\n")
    s += "never reached"


def chat(s, question):
    s += rl.system("Be brief.")
    with s.user():
        s += question
    s += rl.assistant(rl.gen("answer"))


def test_prefix_stops_at_the_first_generation() -> None:
    assert trace_constant_prefix(few_shot, CHATML, {"question": "2+2?"}) == "Q: 1+1?\nA: 2\n\nQ: 2+2?\nA:"


def test_roles_render_through_the_template() -> None:
    prefix = trace_constant_prefix(chat, LLAMA3, {"question": "Why?"})
    assert prefix == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                      "<|start_header_id|>user<|end_header_id|>\n\nWhy?<|eot_id|>"
                      "<|start_header_id|>assistant<|end_header_id|>\n\n")


def test_messages_and_default_system_prompt() -> None:
    s = ProgramState(PrefixTracer(dataclasses.replace(CHATML, default_system_prompt="SYS")))
    s += rl.user("hello") + rl.assistant("hi there")
    assert s.messages() == [{"role": "system", "content": "SYS"}, {"role": "user", "content": "hello"},
                            {"role": "assistant", "content": "hi there"}]
    assert s.text().startswith("<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\nhello")


def test_mismatched_roles_raise() -> None:
    s = ProgramState(PrefixTracer(CHATML))
    s += rl.user_begin()
    with pytest.raises(ValueError, match="open role"):
        s += rl.assistant_end()


@pytest.mark.parametrize("step", ["read", "fork", "raise"])
def test_tracing_stops_at_reads_forks_and_errors(step: str) -> None:
    def prog(s):
        s += "constant "
        if step == "read":
            s += s["x"]
        elif step == "fork":
            s.fork(2)
        else:
            raise RuntimeError("program bug")
        s += "after"

    assert trace_constant_prefix(prog, CHATML, {}) == "constant "


def test_program_catching_exceptions_cannot_swallow_the_stop() -> None:
    def prog(s):
        s += "a"
        try:
            s += rl.gen("x")
        except Exception:
            s += "swallowed"

    assert trace_constant_prefix(prog, CHATML, {}) == "a"


def test_common_prefix() -> None:
    assert common_prefix(["Q: a\nA:", "Q: b\nA:"]) == "Q:"  # never ends in whitespace
    assert common_prefix(["x\nQ: Who?", "x\nQ: What?"]) == "x\nQ:"  # nor inside a word
    assert common_prefix(["Q: What is a", "Q: What is b"]) == "Q: What is"
    assert common_prefix(["same", "same"]) == "same"
    assert common_prefix([]) == ""
