"""GGUF -> Hugging Face folder conversion, checked against transformers' own GGUF loader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from safetensors import safe_open

from radixlm.model_loader.gguf_convert import converted_dir_for, unpermute_rotary
from radixlm.model_loader.resolve import resolve_model_dir


@pytest.fixture(scope="module")
def hf_gguf_model(embedded_gguf: str) -> torch.nn.Module:
    """transformers' reference: the same GGUF dequantized by its slow gguf_file path."""
    pytest.importorskip("accelerate")
    from transformers import AutoModelForCausalLM

    folder, name = os.path.split(embedded_gguf)
    return AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()


@pytest.mark.slow
def test_every_tensor_matches_transformers_gguf_loader(smollm2_dir: str, hf_gguf_model: torch.nn.Module) -> None:
    reference = hf_gguf_model.state_dict()
    with safe_open(os.path.join(smollm2_dir, "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
        assert names == set(reference) - {"lm_head.weight"}  # tied: lm_head is the embedding
        for name in names:
            ours = f.get_tensor(name)
            assert ours.dtype == torch.float32, name
            torch.testing.assert_close(ours, reference[name], rtol=1e-6, atol=1e-6, msg=name)


@pytest.mark.slow
def test_greedy_generation_matches_transformers_gguf_loader(smollm2_dir: str, hf_gguf_model: torch.nn.Module) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ours = AutoModelForCausalLM.from_pretrained(smollm2_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    input_ids = tokenizer(text, return_tensors="pt").input_ids
    expected = hf_gguf_model.generate(input_ids, max_new_tokens=16, do_sample=False)
    actual = ours.generate(input_ids, max_new_tokens=16, do_sample=False)
    assert actual.tolist() == expected.tolist()


def test_config_describes_smollm2(smollm2_dir: str) -> None:
    with open(os.path.join(smollm2_dir, "config.json")) as f:
        config = json.load(f)
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert (config["hidden_size"], config["num_hidden_layers"]) == (576, 30)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["vocab_size"] == 49152 and config["max_position_embeddings"] == 8192
    assert config["tie_word_embeddings"] is True and config["dtype"] == "float32"
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)


def test_tokenizer_has_chatml_template_and_special_tokens(smollm2_dir: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id) == (1, 2, 2)
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                         add_generation_prompt=True)
    assert text.endswith("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    with open(os.path.join(smollm2_dir, "tokenizer_config.json")) as f:
        assert "<|im_start|>" in json.load(f)["chat_template"]


def test_cached_conversion_is_reused_quickly(smollm2_dir: str, embedded_gguf: str) -> None:
    start = time.perf_counter()
    assert resolve_model_dir(None) == smollm2_dir == converted_dir_for(embedded_gguf)
    assert resolve_model_dir(embedded_gguf) == smollm2_dir
    assert time.perf_counter() - start < 3.0


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    heads, head_dim, hidden = 3, 8, 5
    hf = torch.randn(heads * head_dim, hidden)
    # llama.cpp's convert script: view rows as [heads, 2, head_dim/2] and swap the last two
    gguf_rows = hf.reshape(heads, 2, head_dim // 2, hidden).transpose(1, 2).reshape(hf.shape)
    assert torch.equal(unpermute_rotary(gguf_rows, heads), hf)


_CONVERT_SCRIPT = "from radixlm.model_loader.resolve import resolve_model_dir; print(resolve_model_dir(None))"


@pytest.mark.slow
def test_concurrent_conversions_produce_one_complete_folder(tmp_path: str) -> None:
    env = {**os.environ, "RADIXLM_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _CONVERT_SCRIPT], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0
        outputs.append(out.strip())
    assert outputs[0] == outputs[1]
    assert sorted(os.listdir(outputs[0])) == sorted(["config.json", "generation_config.json", "model.safetensors",
                                                     "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"])
    leftovers = [n for n in os.listdir(tmp_path) if ".tmp-" in n]
    assert leftovers == []
