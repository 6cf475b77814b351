"""ModelRunner: pool sizing, logprob outputs against transformers, sampling through the runner."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder
from radixlm.model_executor.model_runner import ModelRunner
from radixlm.server_args import ServerArgs


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("tiny_llama"))
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=2, vocab_size=512, max_position_embeddings=256,
                      architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(folder)
    return folder


def make_runner(folder: str, **kwargs: object) -> ModelRunner:
    return ModelRunner(ServerArgs(model_path=folder, device="cpu", dtype="float32", **kwargs).resolved())


def test_pool_sizes_follow_flags_and_cpu_defaults(tiny_dir: str) -> None:
    runner = make_runner(tiny_dir, max_total_tokens=1000, max_running_requests=8)
    assert runner.max_total_num_tokens == 1000 and runner.token_to_kv_pool_allocator.available_size() == 1000
    assert runner.max_running_requests == 8 and runner.req_to_token_pool.size == 8
    assert runner.token_to_kv_pool.k_buffer[0].shape == (1001, 2, 16)
    default = make_runner(tiny_dir)
    assert default.max_total_num_tokens == 65536  # tiny KV: the CPU cap, not the RAM share
    assert default.max_running_requests == 256
    capped = make_runner(tiny_dir, max_total_tokens=10)
    assert capped.max_running_requests == 10  # never more requests than KV slots


def test_logprobs_match_log_softmax_of_hf_logits(tiny_dir: str) -> None:
    runner = make_runner(tiny_dir, max_total_tokens=2048)
    hf = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float32).eval()
    prompts = [[5, 9, 33, 100, 7], [1, 2, 3]]
    builder = ForwardBatchBuilder.for_runner(runner)
    rows = runner.req_to_token_pool.alloc(2)
    batch = builder.extend(rows, [0, 0], prompts, return_logprob=True, top_logprobs_nums=[3, 0],
                           logprob_start_lens=[1, 0])
    out = runner.forward(batch)
    ref = [torch.log_softmax(hf(torch.tensor([p])).logits[0].float(), -1) for p in prompts]
    # request 0: positions 1..3 score tokens 2..4; request 1: positions 0..1 score tokens 1..2
    want = torch.stack([ref[0][1, 33], ref[0][2, 100], ref[0][3, 7], ref[1][0, 2], ref[1][1, 3]])
    torch.testing.assert_close(out.input_token_logprobs, want, rtol=1e-4, atol=1e-4)
    assert out.input_top_logprobs_val.shape == (5, 3)
    torch.testing.assert_close(out.input_top_logprobs_val[0], ref[0][1].topk(3).values, rtol=1e-4, atol=1e-4)
    last = torch.stack([ref[0][-1], ref[1][-1]])
    assert torch.equal(out.next_token_ids, last.argmax(-1))
    torch.testing.assert_close(out.next_token_logprobs, last.max(-1).values, rtol=1e-4, atol=1e-4)
    assert out.next_top_logprobs_idx.shape == (2, 3)
    builder.release(rows, [5, 3])


def test_unknown_attention_backend_is_named(tiny_dir: str) -> None:
    with pytest.raises(ValueError, match="nonsense"):
        make_runner(tiny_dir, attention_backend="nonsense", max_total_tokens=64)
