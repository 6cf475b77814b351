"""Model path resolution, ModelConfig and tokenizer loading on the embedded SmolLM2."""

from __future__ import annotations

import os

import pytest
import torch

from radixlm.model_loader.model_config import ModelConfig, resolve_dtype
from radixlm.model_loader.resolve import default_model_name, resolve_model_dir
from radixlm.model_loader.tokenizer import get_tokenizer
from radixlm.server_args import ServerArgs


def test_embedded_model_is_found(embedded_gguf: str) -> None:
    assert os.path.isfile(embedded_gguf) and embedded_gguf.endswith(".gguf")
    assert default_model_name() == "SmolLM2-135M-Instruct"


def test_unknown_path_is_named(tmp_path: str) -> None:
    missing = os.path.join(tmp_path, "no-such-model")
    with pytest.raises(FileNotFoundError, match="no-such-model"):
        resolve_model_dir(missing)


def test_folder_resolves_to_itself(smollm2_dir: str) -> None:
    assert resolve_model_dir(smollm2_dir) == smollm2_dir


def test_model_config_of_smollm2(smollm2_dir: str) -> None:
    config = ModelConfig.from_server_args(ServerArgs().resolved())
    assert config.model_dir == smollm2_dir
    assert config.architecture == "LlamaForCausalLM"
    assert (config.num_hidden_layers, config.num_attention_heads, config.num_key_value_heads) == (30, 9, 3)
    assert (config.head_dim, config.vocab_size, config.context_len) == (64, 49152, 8192)
    assert config.eos_token_ids == {2}
    assert config.hf_config.tie_word_embeddings


def test_context_length_and_dtype_overrides(smollm2_dir: str) -> None:
    config = ModelConfig(smollm2_dir, dtype="bfloat16", context_length=1024)
    assert config.context_len == 1024 and config.dtype == torch.bfloat16


def test_auto_dtype_is_float32_on_cpu_and_config_dtype_on_cuda() -> None:
    assert resolve_dtype("auto", torch.bfloat16, "cpu") == torch.float32
    assert resolve_dtype("auto", torch.bfloat16, "cuda") == torch.bfloat16
    assert resolve_dtype("float16", torch.bfloat16, "cpu") == torch.float16
    with pytest.raises(ValueError, match="dtype"):
        resolve_dtype("int8", None, "cpu")


def test_tokenizer_round_trip_and_chat_template(smollm2_dir: str) -> None:
    tokenizer = get_tokenizer(smollm2_dir)
    ids = tokenizer.encode("The capital of France is Paris.")
    assert tokenizer.decode(ids) == "The capital of France is Paris."
    assert tokenizer.chat_template and tokenizer.eos_token == "<|im_end|>"
    assert get_tokenizer(None).vocab_size == tokenizer.vocab_size
