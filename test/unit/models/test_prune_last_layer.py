"""The last decoder layer runs for each request's last new token only in extend batches
(`LlamaForCausalLM.skips_unread_rows`): the same next-token logits and KV pool as the full layer.

Two runners load one tiny random model, one pruning and one not (RADIXLM_PRUNE_LAST_LAYER=0),
and run the same forwards into pools of their own: a prefill of mixed lengths (one prompt only
partly), then a MIXED batch holding the rest of that prompt over its cached prefix, a new prompt,
a prompt over another request's cached slots (a radix-cache hit) and a 1-token decode row.
"""

from __future__ import annotations

import pytest
import torch
from test_tiny_parity import build_hf, one_torch_thread  # noqa: F401 (autouse fixture: one torch thread)

from radixlm.model_executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder
from radixlm.model_executor.model_runner import ModelRunner
from radixlm.server_args import ServerArgs

# Not bit for bit: the pruned layer computes the last rows in other shapes than the full one (one query
# per request over the padded pool or through the decode kernel, o_proj/MLP matmuls of bs rows), and the
# CPU SDPA and GEMM kernels pick their blocking, hence their summation order, by shape. The float32 logits
# (|x| < 1.3 here) differ by at most 1.8e-7 on either backend; a wrong row or a missing token is far larger
TOL = dict(atol=1e-5, rtol=1e-5)
HAS_CUDA = torch.cuda.is_available()
BACKENDS = ["torch_native", pytest.param("triton", marks=pytest.mark.skipif(
    HAS_CUDA, reason="CPU runs of the Triton kernels use the interpreter; CUDA present"))]


def make_runner(folder: str, backend: str, prune: bool, monkeypatch: pytest.MonkeyPatch) -> ModelRunner:
    monkeypatch.setenv("RADIXLM_PRUNE_LAST_LAYER", "1" if prune else "0")
    runner = ModelRunner(ServerArgs(model_path=folder, device="cpu", dtype="float32", max_total_tokens=2048,
                                    attention_backend=backend).resolved())
    assert runner.model.prune_last_layer is prune
    return runner


class Scenario:
    """One runner's requests: rows of its request table, and the forwards the test sends."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner
        self.builder = ForwardBatchBuilder.for_runner(runner)
        self.rows = runner.req_to_token_pool.alloc(5)
        self.last_layer_rows: list[int] = []  # rows the last layer's MLP ran on, per forward
        runner.model.model.layers[-1].mlp.register_forward_hook(
            lambda module, args, out: self.last_layer_rows.append(args[0].shape[0]))

    def prefill(self, prompts: list[list[int]], **logprobs: object) -> ForwardBatch:
        return self.builder.extend(self.rows[:len(prompts)], [0] * len(prompts), prompts, **logprobs)

    def mixed(self, prompts: list[list[int]], split: int, shared: int) -> ForwardBatch:
        """Request 1's rest over its cached `split` tokens, a new request, request 4 over request 0's first
        `shared` slots (what a radix-cache hit hands out) and one decode row for request 0."""
        table = self.runner.req_to_token_pool
        table.write(self.rows[4], 0, table.req_to_token[self.rows[0], :shared].long())
        rows = [self.rows[1], self.rows[3], self.rows[4], self.rows[0]]
        new = [prompts[1][split:], prompts[3], prompts[4][shared:], [7]]
        fb = self.builder.extend(rows, [split, 0, shared, len(prompts[0])], new)
        fb.forward_mode = ForwardMode.MIXED
        return fb

    def logits(self, fb: ForwardBatch) -> torch.Tensor:
        return self.runner.forward_logits(fb).next_token_logits


def prompts_and_split() -> tuple[list[list[int]], int, int]:
    """Five prompts, where request 1's first extend stops, and how many first tokens request 4 shares with 0."""
    g = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (31, 100, 9, 64, 40)]
    prompts[4][:20] = prompts[0][:20]  # request 4 starts with request 0's first 20 tokens
    return prompts, 60, 20


def assert_same_pools(a: ModelRunner, b: ModelRunner) -> None:
    for layer in range(a.model_config.num_hidden_layers):
        assert torch.equal(a.token_to_kv_pool.k_buffer[layer], b.token_to_kv_pool.k_buffer[layer])
        assert torch.equal(a.token_to_kv_pool.v_buffer[layer], b.token_to_kv_pool.v_buffer[layer])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_pruned_last_layer_matches_the_full_layer(kind: str, backend: str, tmp_path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    build_hf(kind, str(tmp_path))
    pruned, full = (Scenario(make_runner(str(tmp_path), backend, prune, monkeypatch)) for prune in (True, False))
    prompts, split, shared = prompts_and_split()
    first = [prompts[0], prompts[1][:split], prompts[2]]
    for make_batch in (lambda s: s.prefill(first), lambda s: s.mixed(prompts, split, shared)):
        batches = [make_batch(s) for s in (pruned, full)]
        got, want = pruned.logits(batches[0]), full.logits(batches[1])
        assert pruned.runner.model.skips_unread_rows(batches[0])  # the runner attached its backend
        torch.testing.assert_close(got, want, **TOL)
        assert torch.equal(got.argmax(-1), want.argmax(-1))
        assert_same_pools(pruned.runner, full.runner)
        assert pruned.last_layer_rows[-1] == batches[0].batch_size
        assert full.last_layer_rows[-1] == batches[1].num_tokens


def test_input_logprobs_keep_the_full_layer(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prompt logprobs read every new token's hidden state: the full layer runs, pruning on or off."""
    build_hf("llama", str(tmp_path))
    pruned, full = (Scenario(make_runner(str(tmp_path), "torch_native", prune, monkeypatch))
                    for prune in (True, False))
    prompts, _, _ = prompts_and_split()
    logprobs = dict(return_logprob=True, top_logprobs_nums=[2, 0, 1], logprob_start_lens=[0, 5, 0])
    batches = [s.prefill(prompts[:3], **logprobs) for s in (pruned, full)]
    outs = [s.runner.forward_logits(fb) for s, fb in zip((pruned, full), batches)]
    assert pruned.last_layer_rows == full.last_layer_rows == [sum(len(p) for p in prompts[:3])]
    for name in ("next_token_logits", "input_token_logprobs", "input_top_logprobs_val", "input_top_logprobs_idx"):
        assert torch.equal(getattr(outs[0], name), getattr(outs[1], name)), name
    assert_same_pools(pruned.runner, full.runner)
    model = pruned.runner.model
    with pytest.raises(ValueError, match="last_rows_only"):  # one row per request cannot score the prompt
        model.logits_processor(batches[0].input_ids, torch.zeros(3, 64), model.lm_head, batches[0],
                               last_rows_only=True)


def test_decode_and_flashinfer_keep_the_full_layer(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    from radixlm.layers.attention.flashinfer_backend import FlashInferAttnBackend

    build_hf("llama", str(tmp_path))
    s = Scenario(make_runner(str(tmp_path), "torch_native", True, monkeypatch))
    prompts, _, _ = prompts_and_split()
    fb = s.prefill(prompts[:2])
    out = s.runner.forward(fb)
    decode = s.builder.decode_next(fb, out.next_token_ids)
    assert not s.runner.model.skips_unread_rows(decode)
    s.runner.forward(decode)
    assert s.last_layer_rows == [2, 2]
    assert not FlashInferAttnBackend.supports_extend_last
