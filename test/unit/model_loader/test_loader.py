"""load_model: real checkpoint and seeded dummy weights through the model registry."""

from __future__ import annotations

import json
import os

import pytest
import torch

from radixlm.model_loader.loader import init_dummy_weights, load_model
from radixlm.model_loader.model_config import ModelConfig


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=256, max_position_embeddings=128,
                         tie_word_embeddings=True)
    folder = str(tmp_path_factory.mktemp("tiny_llama"))
    LlamaForCausalLM(config).save_pretrained(folder)
    return folder


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_dummy_init_is_seeded_and_shaped() -> None:
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16))
    net.add_module("final_norm", torch.nn.LayerNorm(16))
    init_dummy_weights(net)
    first = _state(net)
    torch.manual_seed(123)  # the global RNG must not matter
    init_dummy_weights(net)
    assert all(torch.equal(first[k], v) for k, v in _state(net).items())
    assert abs(first["0.weight"].std().item() - 0.02) < 0.01
    assert torch.equal(first["final_norm.weight"], torch.ones(16))
    assert torch.equal(first["0.bias"], torch.zeros(16))


def test_loads_checkpoint_and_dummy(tiny_llama_dir: str) -> None:
    pytest.importorskip("radixlm.models.llama")
    from safetensors.torch import load_file

    config = ModelConfig(tiny_llama_dir)
    model = load_model(config, "auto", "cpu")
    embed = load_file(os.path.join(tiny_llama_dir, "model.safetensors"))["model.embed_tokens.weight"]
    params = dict(model.named_parameters())
    loaded = next(p for n, p in params.items() if "embed_tokens" in n)
    assert torch.equal(loaded.detach(), embed)
    dummy_a = _state(load_model(config, "dummy", "cpu"))
    dummy_b = _state(load_model(config, "dummy", "cpu"))
    assert all(torch.equal(dummy_a[k], dummy_b[k]) for k in dummy_a)
    assert not torch.equal(dummy_a[next(n for n in params if "embed_tokens" in n)], embed)


def test_dummy_needs_no_weight_files(tiny_llama_dir: str, tmp_path: str) -> None:
    pytest.importorskip("radixlm.models.llama")
    with open(os.path.join(tiny_llama_dir, "config.json")) as f:
        config_json = json.load(f)
    with open(os.path.join(tmp_path, "config.json"), "w") as f:
        json.dump(config_json, f)
    model = load_model(ModelConfig(str(tmp_path)), "dummy", "cpu")
    assert all(torch.isfinite(p).all() for p in model.parameters())
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        load_model(ModelConfig(str(tmp_path)), "auto", "cpu")


def test_unknown_architecture_is_named(tiny_llama_dir: str, tmp_path: str) -> None:
    pytest.importorskip("radixlm.models.registry")
    with open(os.path.join(tiny_llama_dir, "config.json")) as f:
        config_json = json.load(f)
    config_json["architectures"] = ["NoSuchForCausalLM"]
    with open(os.path.join(tmp_path, "config.json"), "w") as f:
        json.dump(config_json, f)
    with pytest.raises(ValueError, match="NoSuchForCausalLM"):
        load_model(ModelConfig(str(tmp_path)), "dummy", "cpu")
