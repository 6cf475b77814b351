"""ModelRunner: pool sizing, logprob outputs against transformers, sampling through the runner."""

from __future__ import annotations

from typing import Optional

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

import radixlm.layers.logits_processor as logits_module
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


def test_memory_report_counts_weights_pool_and_table(tiny_dir: str) -> None:
    runner = make_runner(tiny_dir, max_total_tokens=1000, max_running_requests=8)
    report = runner.memory_report()
    # tiny Llama in fp32: embed + lm_head untied (2 * 512 * 64), 2 layers of attention, MLP and norms, final norm
    per_layer = 64 * 64 * 2 + 64 * 32 * 2 + 64 * 128 * 3 + 64 * 2
    params = 2 * 512 * 64 + 2 * per_layer + 64
    assert report.weights_gib * 2**30 == params * 4 + 256 * 16 * 4  # plus the layers' one rotary cos/sin cache
    # K and V, 2 layers, 1001 slots (slot 0 is the padding sink), 2 KV heads of 16, fp32
    assert report.kv_cache_gib * 2**30 == 2 * 2 * 1001 * 2 * 16 * 4
    assert report.req_to_token_gib * 2**30 == 8 * runner.req_to_token_pool.req_to_token.shape[1] * 4
    assert report.peak_reserved_gib is None and report.device_total_gib is None  # CUDA-only fields
    assert set(report.as_dict()) >= {"weights_gib", "kv_cache_gib", "peak_other_gib"}


@pytest.mark.parametrize("slice_rows", [None, 2])  # None: one slice; 2: the 5 scored rows in slices of 2, 2, 1
def test_logprobs_match_log_softmax_of_hf_logits(tiny_dir: str, monkeypatch: pytest.MonkeyPatch,
                                                 slice_rows: Optional[int]) -> None:
    if slice_rows is not None:
        monkeypatch.setattr(logits_module, "LOGPROB_SLICE_ELEMENTS", slice_rows * 512)  # the tiny vocabulary
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
    torch.testing.assert_close(out.input_top_logprobs_val[4], ref[1][1].topk(3).values, rtol=1e-4, atol=1e-4)
    assert torch.equal(out.input_top_logprobs_idx[4], ref[1][1].topk(3).indices)
    last = torch.stack([ref[0][-1], ref[1][-1]])
    assert torch.equal(out.next_token_ids, last.argmax(-1))
    torch.testing.assert_close(out.next_token_logprobs, last.max(-1).values, rtol=1e-4, atol=1e-4)
    assert out.next_top_logprobs_idx.shape == (2, 3)
    builder.release(rows, [5, 3])


def test_unknown_attention_backend_is_named(tiny_dir: str) -> None:
    with pytest.raises(ValueError, match="nonsense"):
        make_runner(tiny_dir, attention_backend="nonsense", max_total_tokens=64)


def test_decode_next_follows_the_static_batch(tiny_dir: str) -> None:
    """The steady decode step built from the last batch's device tensors (bench_one_batch's) gives the
    tokens and the req_to_token rows of the list-built one, and refuses an extend row with no tokens."""
    from radixlm.model_executor.forward_batch_builder import generate_static_batch

    runner = make_runner(tiny_dir, max_total_tokens=2048)
    prompts = [[5, 9, 33, 100, 7], [1, 2, 3]]
    want = generate_static_batch(runner, prompts, 6)
    builder = ForwardBatchBuilder.for_runner(runner)
    rows = runner.req_to_token_pool.alloc(2)
    fb = builder.extend(rows, [0, 0], prompts)
    out = runner.forward(fb)
    tokens = [out.next_token_ids]
    for _ in range(5):
        fb = builder.decode_next(fb, out.next_token_ids)
        out = runner.forward(fb)
        tokens.append(out.next_token_ids)
    assert torch.stack(tokens, dim=1).tolist() == want
    assert fb.seq_lens.tolist() == fb.seq_lens_cpu == [10, 8]
    table = runner.req_to_token_pool.req_to_token
    assert len(set(table[rows[0], :10].tolist()) | set(table[rows[1], :8].tolist())) == 18  # distinct slots
    builder.release(rows, fb.seq_lens_cpu)
    assert runner.token_to_kv_pool_allocator.available_size() == 2048
    empty = builder.extend(runner.req_to_token_pool.alloc(1), [0], [[]])
    with pytest.raises(ValueError, match="new tokens"):
        builder.decode_next(empty, torch.zeros(1, dtype=torch.int64))


def test_fp8_kv_cache_flag(tiny_dir: str) -> None:
    """--kv-cache-dtype fp8_e4m3: an fp8 pool (half the bytes of bf16 per token), logits near the
    float32 pool's; an unknown value is refused by name."""
    prompts = [[5, 9, 33, 100, 7, 8, 200, 3], [1, 2, 3]]
    logits = {}
    for kv in ("auto", "fp8_e4m3"):
        runner = make_runner(tiny_dir, max_total_tokens=512, kv_cache_dtype=kv)
        builder = ForwardBatchBuilder.for_runner(runner)
        fb = builder.extend(runner.req_to_token_pool.alloc(2), [0, 0], prompts)
        out = runner.forward(fb)
        logits[kv] = runner.forward_logits(builder.decode_next(fb, out.next_token_ids)).next_token_logits
        if kv != "auto":
            assert runner.token_to_kv_pool.k_buffer[0].dtype == torch.float8_e4m3fn
            assert runner.kv_bytes_per_token() * 4 == make_runner(tiny_dir, max_total_tokens=8).kv_bytes_per_token()
    scale = logits["auto"].std().item()
    assert (logits["fp8_e4m3"] - logits["auto"]).abs().max().item() < 0.1 * scale
    with pytest.raises(ValueError, match="kv-cache-dtype"):
        make_runner(tiny_dir, kv_cache_dtype="int4")
