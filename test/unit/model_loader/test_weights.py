"""Checkpoint iteration: single, sharded (index), .bin fallback, and missing files."""

from __future__ import annotations

import os

import pytest
import torch

from radixlm.model_loader.weights import iterate_weights, weight_files


def _tiny_llama(seed: int = 0) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
    return LlamaForCausalLM(config)


@pytest.fixture(scope="module")
def tiny_sharded_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("tiny_sharded"))
    _tiny_llama().save_pretrained(folder, max_shard_size="40KB")
    return folder


def test_sharded_checkpoint_yields_every_tensor(tiny_sharded_dir: str) -> None:
    assert os.path.isfile(os.path.join(tiny_sharded_dir, "model.safetensors.index.json"))
    assert len(weight_files(tiny_sharded_dir)) > 1
    expected = _tiny_llama().state_dict()
    loaded = dict(iterate_weights(tiny_sharded_dir))
    assert set(loaded) == set(expected)
    for name, tensor in loaded.items():
        assert torch.equal(tensor, expected[name]), name


def test_missing_shard_is_named(tiny_sharded_dir: str, tmp_path: str) -> None:
    import shutil

    broken = os.path.join(tmp_path, "broken")
    shutil.copytree(tiny_sharded_dir, broken)
    victim = sorted(n for n in os.listdir(broken) if n.endswith(".safetensors"))[-1]
    os.remove(os.path.join(broken, victim))
    with pytest.raises(FileNotFoundError, match=victim):
        list(iterate_weights(broken))


def test_folder_without_weights_is_named(tmp_path: str) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        list(iterate_weights(str(tmp_path)))


def test_missing_folder_is_named(tmp_path: str) -> None:
    missing = os.path.join(tmp_path, "nope")
    with pytest.raises(FileNotFoundError, match="nope"):
        list(iterate_weights(missing))


def test_bin_checkpoint_fallback(tmp_path: str) -> None:
    state = _tiny_llama(seed=1).state_dict()
    torch.save(state, os.path.join(tmp_path, "pytorch_model.bin"))
    loaded = dict(iterate_weights(str(tmp_path)))
    assert set(loaded) == set(state)
    assert all(torch.equal(loaded[n], state[n]) for n in state)
