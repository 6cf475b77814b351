"""Greedy parity with transformers for tiny random Llama, Qwen2 and Qwen3 models.

Each HF model is built from a config with a fixed seed and saved as a folder; our
ModelRunner loads that folder (the real loader path), then one batch of mixed-length
prompts is generated and compared token for token with `generate(do_sample=False)`,
once with a single prefill and once with every prompt split over two extends.
"""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

from radixlm.model_executor.forward_batch_builder import generate_static_batch
from radixlm.model_executor.model_runner import ModelRunner
from radixlm.server_args import ServerArgs

COMMON = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=2, vocab_size=512, max_position_embeddings=1024)
CONFIGS = {
    "llama": lambda: LlamaConfig(**COMMON, tie_word_embeddings=False, architectures=["LlamaForCausalLM"],
                                 rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 128,
                                                  "rope_theta": 500000.0}),
    "llama-tied": lambda: LlamaConfig(**COMMON, tie_word_embeddings=True, architectures=["LlamaForCausalLM"]),
    "qwen2": lambda: Qwen2Config(**COMMON, tie_word_embeddings=False, architectures=["Qwen2ForCausalLM"]),
    "qwen3": lambda: Qwen3Config(**COMMON, head_dim=32, tie_word_embeddings=True,
                                 architectures=["Qwen3ForCausalLM"]),
}
PROMPT_LENS = [3, 9, 31, 64, 100, 150, 7, 200]
NEW_TOKENS = 24


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The CI box has 2 shared cores: one intra-op thread avoids OpenMP oversubscription (5x faster here)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def build_hf(kind: str, folder: str) -> torch.nn.Module:
    torch.manual_seed(1234)
    model = AutoModelForCausalLM.from_config(CONFIGS[kind](), dtype=torch.float32).eval()
    with torch.no_grad():  # random biases/norms so those code paths are exercised
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(folder)
    return model


def hf_greedy(model: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    out = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=n, eos_token_id=None,
                         pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_tiny_model_greedy_parity(kind: str, tmp_path) -> None:
    hf = build_hf(kind, str(tmp_path))
    runner = ModelRunner(ServerArgs(model_path=str(tmp_path), device="cpu", dtype="float32",
                                    max_total_tokens=8192).resolved())
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in PROMPT_LENS]
    expected = [hf_greedy(hf, p, NEW_TOKENS) for p in prompts]
    assert generate_static_batch(runner, prompts, NEW_TOKENS) == expected
    split = [max(1, n // 2) for n in PROMPT_LENS]
    assert generate_static_batch(runner, prompts, NEW_TOKENS, split_at=split) == expected
    assert runner.token_to_kv_pool_allocator.available_size() == 8192  # everything was released
