"""Tiny random HF models written as F32 GGUF files (the llama.cpp layout) convert back exactly."""

from __future__ import annotations

import os

import gguf
import pytest
import torch

from radixlm.model_loader.gguf_convert import convert_gguf

_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
_GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def _byte_level_tokens() -> list[str]:
    from tokenizers.pre_tokenizers import ByteLevel

    return sorted(ByteLevel.alphabet()) + ["Ġt"] + _SPECIALS


def _gguf_name(hf_name: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf_name in top:
        return top[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module, suffix = rest.rsplit(".", 1)
    return f"blk.{layer}.{_GGUF_LAYER_NAMES[module]}.{suffix}"


def _llama_cpp_permute(w: torch.Tensor, n_head: int) -> torch.Tensor:
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def _write_gguf(model: torch.nn.Module, arch: str, path: str) -> None:
    cfg = model.config
    writer = gguf.GGUFWriter(path, arch)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_key_length(cfg.head_dim)
    writer.add_value_length(cfg.head_dim)
    writer.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    tokens = _byte_level_tokens()
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * 257 + [3] * len(_SPECIALS))
    writer.add_token_merges(["Ġ t"])
    writer.add_bos_token_id(258)
    writer.add_eos_token_id(259)
    writer.add_chat_template("{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}")
    for name, tensor in model.state_dict().items():
        if cfg.tie_word_embeddings and name == "lm_head.weight":
            continue
        if arch == "llama" and "q_proj" in name:
            tensor = _llama_cpp_permute(tensor, cfg.num_attention_heads)
        elif arch == "llama" and "k_proj" in name:
            tensor = _llama_cpp_permute(tensor, cfg.num_key_value_heads)
        writer.add_tensor(_gguf_name(name), tensor.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _tiny_model(model_type: str, tie: bool) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    config = AutoConfig.for_model(model_type, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  vocab_size=len(_byte_level_tokens()), max_position_embeddings=256,
                                  rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=tie)
    return AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.parametrize("arch,tie", [("llama", False), ("qwen2", True), ("qwen3", False)])
def test_gguf_round_trip_restores_hf_weights(arch: str, tie: bool, tmp_path: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers import AutoModelForCausalLM

    monkeypatch.setenv("RADIXLM_CACHE_DIR", os.path.join(tmp_path, "cache"))
    source = _tiny_model(arch, tie)
    gguf_path = os.path.join(tmp_path, f"tiny-{arch}.gguf")
    _write_gguf(source, arch, gguf_path)

    folder = convert_gguf(gguf_path)
    restored = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert type(restored) is type(source)
    assert restored.config.tie_word_embeddings == tie
    expected = source.state_dict()
    for name, tensor in restored.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)
    input_ids = torch.tensor([[5, 17, 99, 3, 250]])
    torch.testing.assert_close(restored(input_ids).logits, source(input_ids).logits)
