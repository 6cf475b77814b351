"""Weight loading: packed q/k/v and gate/up, tied embeddings, and errors that name what is wrong."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM as HFLlama

from radixlm.models.llama import LlamaForCausalLM
from radixlm.models.registry import get_model_class, resolve_model_class
from radixlm.models.weight_mapping import map_checkpoint_name


def tiny_config(**overrides: object) -> LlamaConfig:
    base = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
                num_hidden_layers=1, vocab_size=100, max_position_embeddings=64, tie_word_embeddings=False)
    return LlamaConfig(**{**base, **overrides})


def hf_state(config: LlamaConfig) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return dict(HFLlama(config).state_dict())


def test_registry_knows_the_families_and_names_unknown_ones() -> None:
    for arch in ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"):
        assert get_model_class(arch).__name__ == arch
    with pytest.raises(ValueError, match="GPTNeoXForCausalLM"):
        get_model_class("GPTNeoXForCausalLM")
    with pytest.raises(ValueError, match="FancyModel"):
        resolve_model_class(["FancyModel"])


def test_packed_names_map_to_fused_parameters() -> None:
    mapping = LlamaForCausalLM.packed_modules_mapping
    assert map_checkpoint_name("model.layers.3.self_attn.k_proj.weight", mapping) == \
        ("model.layers.3.self_attn.qkv_proj.weight", "k")
    assert map_checkpoint_name("model.layers.0.mlp.up_proj.weight", mapping) == \
        ("model.layers.0.mlp.gate_up_proj.weight", 1)
    assert map_checkpoint_name("model.norm.weight", mapping) == ("model.norm.weight", None)


def test_fused_weights_equal_the_concatenated_checkpoint() -> None:
    cfg = tiny_config()
    state = hf_state(cfg)
    model = LlamaForCausalLM(cfg)
    model.load_weights(state.items())
    p = "model.layers.0."
    qkv = torch.cat([state[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
    assert torch.equal(model.model.layers[0].self_attn.qkv_proj.weight, qkv)
    gate_up = torch.cat([state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"]])
    assert torch.equal(model.model.layers[0].mlp.gate_up_proj.weight, gate_up)


def test_tied_embeddings_without_lm_head_in_checkpoint() -> None:
    cfg = tiny_config(tie_word_embeddings=True)
    state = {k: v for k, v in hf_state(cfg).items() if not k.startswith("lm_head")}
    model = LlamaForCausalLM(cfg)
    model.load_weights(state.items())
    assert model.lm_head is model.model.embed_tokens
    assert torch.equal(model.lm_head.weight, state["model.embed_tokens.weight"])


def test_shape_disagreeing_with_config_names_the_parameter() -> None:
    state = hf_state(tiny_config())
    state["model.layers.0.self_attn.k_proj.weight"] = torch.zeros(24, 32)  # config says 2 kv heads * 8 = 16
    with pytest.raises(ValueError, match=r"LlamaForCausalLM.*k_proj\.weight.*qkv_proj\.weight.*\(16, 32\).*\(24, 32\)"):
        LlamaForCausalLM(tiny_config()).load_weights(state.items())


def test_missing_and_unknown_weights_are_named() -> None:
    state = hf_state(tiny_config())
    partial = {k: v for k, v in state.items() if "v_proj" not in k and k != "lm_head.weight"}
    with pytest.raises(ValueError, match=r"missing weights: lm_head\.weight, model\.layers\.0\.self_attn\.v_proj"):
        LlamaForCausalLM(tiny_config()).load_weights(partial.items())
    extra = {**state, "model.layers.0.self_attn.mystery.weight": torch.zeros(1)}
    with pytest.raises(ValueError, match="mystery"):
        LlamaForCausalLM(tiny_config()).load_weights(extra.items())


def test_rotary_inv_freq_in_checkpoint_is_ignored() -> None:
    state = hf_state(tiny_config())
    state["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.zeros(4)
    LlamaForCausalLM(tiny_config()).load_weights(state.items())
