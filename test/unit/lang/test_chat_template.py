"""Chat templates: derived from real tokenizer templates, and the registry."""

import jinja2
import pytest

from radixlm.lang.chat_template import (
    chat_template_names, from_renderer, from_tokenizer, get_chat_template, match_chat_template,
)

# Meta-Llama-3-8B-Instruct's published chat template.
LLAMA3_JINJA = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

CONVERSATIONS = [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
    [{"role": "user", "content": "q1"}, {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}],
]


@pytest.fixture(scope="module")
def smollm_tokenizer():
    from radixlm.model_loader.tokenizer import get_tokenizer

    return get_tokenizer(None)


def test_smollm2_template_matches_its_tokenizer(smollm_tokenizer) -> None:
    template = from_tokenizer(smollm_tokenizer)
    assert template is not None
    assert template.prefix("user") == "<|im_start|>user\n" and template.suffix("user") == "<|im_end|>\n"
    assert template.default_system_prompt and "SmolLM" in template.default_system_prompt
    registered = get_chat_template("smollm2")  # the fallback when a server's tokenizer is not local
    assert (registered.role_prefix_and_suffix, registered.default_system_prompt) == (
        template.role_prefix_and_suffix, template.default_system_prompt)
    for convo in CONVERSATIONS:
        for gen_prompt in (False, True):
            expected = smollm_tokenizer.apply_chat_template(convo, tokenize=False, add_generation_prompt=gen_prompt)
            assert template.render(convo, gen_prompt) == expected


def test_llama3_template_is_derived_with_begin_of_text() -> None:
    jinja = jinja2.Environment().from_string(LLAMA3_JINJA)

    def render(messages, add_generation_prompt):
        return jinja.render(messages=messages, add_generation_prompt=add_generation_prompt,
                            bos_token="<|begin_of_text|>")

    template = from_renderer(render, "llama3", bos_token="<|begin_of_text|>")
    registered = get_chat_template("llama-3-instruct")
    assert template.begin_of_text == registered.begin_of_text == "<|begin_of_text|>"
    assert template.role_prefix_and_suffix == registered.role_prefix_and_suffix
    assert template.default_system_prompt is None
    for convo in CONVERSATIONS:
        assert registered.render(convo, True) == render(convo, True)


def test_registry_lookup_and_matching() -> None:
    assert {"default", "chatml", "llama-3-instruct"} <= set(chat_template_names())
    assert match_chat_template("/models/SmolLM2-135M-Instruct").name == "smollm2"
    assert match_chat_template("Qwen/Qwen2.5-7B-Instruct").name == "chatml"
    assert match_chat_template("meta-llama/Llama-3.1-8B-Instruct").name == "llama-3-instruct"
    assert match_chat_template("/some/unknown/model").name == "default"
    with pytest.raises(ValueError, match="unknown chat template"):
        get_chat_template("nope")
    with pytest.raises(ValueError, match="no role"):
        get_chat_template("chatml").prefix("tool")


def test_template_that_does_not_concatenate_turns_is_rejected() -> None:
    def render(messages, add_generation_prompt):  # reverses turn order
        return "".join(f"[{m['role']}]{m['content']}" for m in reversed(messages))

    with pytest.raises(ValueError, match="concatenation"):
        from_renderer(render, "weird")
