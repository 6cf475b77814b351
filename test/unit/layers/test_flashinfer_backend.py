"""The `flashinfer` attention backend.

On any machine: asking for `flashinfer` where it cannot run (CPU, not installed) logs one warning
and builds a working default backend; the device-side `kv_indices` builder matches the rows it
concatenates. With CUDA and FlashInfer: the backend against `torch_native` on real pools and
ForwardBatches (prefill, extend over cached prefixes, mixed, decode, GQA and MHA, a layer with
another softmax scale), decode through a captured CUDA graph replayed with padding, and a tiny
model's logits through ModelRunner's own CUDA graphs.
"""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace

import pytest
import torch

from radixlm.layers.attention.base import ATTENTION_BACKENDS, create_attention_backend
from radixlm.layers.attention.flashinfer_backend import (build_kv_indices, create_flashinfer_backend,
                                                         flashinfer_unavailable_reason)
from radixlm.layers.attention.torch_native_backend import TorchNativeAttnBackend
from radixlm.layers.radix_attention import RadixAttention
from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from radixlm.model_executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.model_executor.forward_batch_builder import ForwardBatchBuilder

BF16_TOL = {"atol": 2e-2, "rtol": 2e-2}
LOGGER = "radixlm.layers.attention.flashinfer_backend"


class Harness:
    """One request table and allocator; one KV pool per backend. Asserts both backends agree."""

    def __init__(self, backends: tuple[str, ...], device: str, dtype: torch.dtype, q_heads: int, kv_heads: int,
                 head_dim: int) -> None:
        self.device, self.dtype = device, dtype
        self.q_heads, self.kv_heads, self.head_dim = q_heads, kv_heads, head_dim
        self.req_to_token_pool = ReqToTokenPool(8, 1024, device)
        self.builder = ForwardBatchBuilder(self.req_to_token_pool, TokenToKVPoolAllocator(4096, device))
        self.runners = {name: self._runner() for name in backends}
        self.backends = {name: create_attention_backend(name, r) for name, r in self.runners.items()}
        self.layer = RadixAttention(q_heads, head_dim, head_dim ** -0.5, kv_heads, layer_id=1)
        self.lens: dict[int, int] = {}  # req_to_token row -> tokens cached

    def _runner(self) -> SimpleNamespace:
        pool = MHATokenToKVPool(4096, self.dtype, self.kv_heads, self.head_dim, 2, self.device)
        config = SimpleNamespace(num_attention_heads=self.q_heads, num_key_value_heads=self.kv_heads,
                                 head_dim=self.head_dim)
        return SimpleNamespace(token_to_kv_pool=pool, req_to_token_pool=self.req_to_token_pool, model_config=config,
                               device=torch.device(self.device), dtype=self.dtype)

    def batch(self, mode: ForwardMode, rows: list[int], new: list[int]) -> ForwardBatch:
        """Requests in `rows` add `new[i]` tokens to what they hold (a decode adds 1 each)."""
        prefix = [self.lens.get(r, 0) for r in rows]
        if mode.is_decode():
            fb = self.builder.decode(rows, prefix, torch.zeros(len(rows), dtype=torch.int64, device=self.device))
        else:
            fb = self.builder.extend(rows, prefix, [[0] * n for n in new])
            fb.forward_mode = mode
        self.lens.update((r, p + n) for r, p, n in zip(rows, prefix, new))
        fb.req_to_token_pool = self.req_to_token_pool
        return fb

    def i64(self, xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.int64, device=self.device)

    def qkv(self, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        make = lambda heads: torch.randn(n, heads * self.head_dim, device=self.device, dtype=self.dtype)  # noqa: E731
        return make(self.q_heads), make(self.kv_heads), make(self.kv_heads)

    def attend(self, name: str, fb: ForwardBatch, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               layer: RadixAttention | None = None) -> torch.Tensor:
        fb.token_to_kv_pool, fb.attn_backend = self.runners[name].token_to_kv_pool, self.backends[name]
        self.backends[name].init_forward_metadata(fb)
        return (layer or self.layer)(q, k, v, fb)

    def run(self, fb: ForwardBatch, tol: dict, layer: RadixAttention | None = None) -> None:
        q, k, v = self.qkv(fb.num_tokens)
        outs = [self.attend(name, fb, q, k, v, layer) for name in self.runners]
        torch.testing.assert_close(outs[1], outs[0], **tol)
        self.assert_pools_equal(layer_id=(layer or self.layer).layer_id)

    def assert_pools_equal(self, layer_id: int, skip_padding_slot: bool = False) -> None:
        start = 1 if skip_padding_slot else 0  # slot 0: where padded graph rows write
        pools = [r.token_to_kv_pool for r in self.runners.values()]
        assert torch.equal(pools[0].k_buffer[layer_id][start:], pools[1].k_buffer[layer_id][start:])
        assert torch.equal(pools[0].v_buffer[layer_id][start:], pools[1].v_buffer[layer_id][start:])


# ---- fallback and index building (any machine) -----------------------------------------------


def test_registered_under_flashinfer() -> None:
    assert ATTENTION_BACKENDS["flashinfer"] is create_flashinfer_backend


def test_cpu_falls_back_to_torch_native_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        h = Harness(("torch_native", "flashinfer"), "cpu", torch.float32, 4, 2, 32)
    assert isinstance(h.backends["flashinfer"], TorchNativeAttnBackend)
    warnings = [r for r in caplog.records if r.name == LOGGER]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "flashinfer" in warnings[0].getMessage() and "falling back to torch_native" in warnings[0].getMessage()
    exact = {"atol": 0.0, "rtol": 0.0}
    h.run(h.batch(ForwardMode.EXTEND, [0, 1], [9, 30]), exact)
    h.run(h.batch(ForwardMode.EXTEND, [0, 1], [4, 2]), exact)
    h.run(h.batch(ForwardMode.DECODE, [0, 1], [1, 1]), exact)


def test_cuda_without_flashinfer_falls_back_to_triton(monkeypatch: pytest.MonkeyPatch,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    import radixlm.layers.attention.triton_backend  # noqa: F401  registers "triton" before it is replaced below

    monkeypatch.setitem(sys.modules, "flashinfer", None)  # `import flashinfer` now raises ImportError
    built = []

    def stand_in(runner: object) -> TorchNativeAttnBackend:  # TritonAttnBackend needs a GPU to construct
        built.append(runner)
        return TorchNativeAttnBackend(runner)

    monkeypatch.setitem(ATTENTION_BACKENDS, "triton", stand_in)
    pool = MHATokenToKVPool(16, torch.bfloat16, 2, 128, 1, "cpu")
    runner = SimpleNamespace(device=torch.device("cuda", 0), dtype=torch.bfloat16, token_to_kv_pool=pool)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        backend = create_attention_backend("flashinfer", runner)
    assert isinstance(backend, TorchNativeAttnBackend) and built == [runner]
    [record] = [r for r in caplog.records if r.name == LOGGER]
    assert "cannot import flashinfer" in record.getMessage()
    assert "falling back to triton" in record.getMessage()


def test_unserved_dtypes_are_a_reason_to_fall_back() -> None:
    cuda = torch.device("cuda")
    assert "float32" in flashinfer_unavailable_reason(cuda, torch.float32, torch.float32)
    assert flashinfer_unavailable_reason(cuda, torch.bfloat16, torch.float16) is not None
    assert flashinfer_unavailable_reason(torch.device("cpu"), torch.bfloat16, torch.bfloat16) == "device is cpu"


def test_build_kv_indices_concatenates_request_rows() -> None:
    g = torch.Generator().manual_seed(0)
    req_to_token = torch.randint(1, 1000, (6, 64), generator=g, dtype=torch.int32)
    rows, lens = [4, 0, 4, 2], [5, 64, 1, 17]  # a row may appear twice (padded graph rows reuse row 0)
    want = torch.cat([req_to_token[r, :n] for r, n in zip(rows, lens)])
    rows_t, lens_t = torch.tensor(rows), torch.tensor(lens)
    got = build_kv_indices(req_to_token, rows_t, lens_t, sum(lens))
    assert got.dtype == torch.int32 and torch.equal(got, want)
    out = torch.full((200,), -1, dtype=torch.int32)
    view = build_kv_indices(req_to_token, rows_t, lens_t, sum(lens), out=out)
    assert view.data_ptr() == out.data_ptr() and torch.equal(view, want) and (out[sum(lens):] == -1).all()


# ---- correctness against torch_native (CUDA + FlashInfer) -----------------------------------


@pytest.fixture
def flashinfer_gpu() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("flashinfer")


HEADS = [pytest.param(32, 8, id="gqa32-8"), pytest.param(8, 8, id="mha8"), pytest.param(16, 2, id="gqa16-2")]


def gpu_harness(q_heads: int, kv_heads: int) -> Harness:
    from radixlm.layers.attention.flashinfer_backend import FlashInferAttnBackend

    h = Harness(("torch_native", "flashinfer"), "cuda", torch.bfloat16, q_heads, kv_heads, 128)
    assert isinstance(h.backends["flashinfer"], FlashInferAttnBackend)
    return h


@pytest.mark.parametrize("q_heads,kv_heads", HEADS)
def test_matches_torch_native(flashinfer_gpu: None, q_heads: int, kv_heads: int) -> None:
    torch.manual_seed(0)
    h = gpu_harness(q_heads, kv_heads)
    h.run(h.batch(ForwardMode.EXTEND, [2, 0, 1], [30, 7, 250]), BF16_TOL)  # prefill, no prefix
    h.run(h.batch(ForwardMode.EXTEND, [2, 0, 1, 3], [5, 1, 20, 9]), BF16_TOL)  # over cached prefixes; row 3 new
    h.run(h.batch(ForwardMode.DECODE, [2, 0, 1, 3], [1, 1, 1, 1]), BF16_TOL)
    h.run(h.batch(ForwardMode.MIXED, [2, 0, 4], [1, 1, 40]), BF16_TOL)  # decodes as 1-token extends + a prefill
    h.run(h.batch(ForwardMode.DECODE, [4, 1, 3, 0, 2], [1, 1, 1, 1, 1]), BF16_TOL)
    other_scale = RadixAttention(q_heads, 128, 0.05, kv_heads, layer_id=0)  # re-plans for its scale
    h.run(h.batch(ForwardMode.DECODE, [4, 1], [1, 1]), BF16_TOL, layer=other_scale)
    h.run(h.batch(ForwardMode.EXTEND, [4, 1], [3, 60]), BF16_TOL, layer=other_scale)


class GraphInputs:
    """Static decode inputs of one captured batch size, filled like CudaGraphRunner.replay fills them."""

    def __init__(self, h: Harness, bs: int) -> None:
        self.h, self.bs = h, bs
        self.req_pool_indices = h.i64([0] * bs)
        self.seq_lens = h.i64([1] * bs)
        self.out_cache_loc = h.i64([0] * bs)
        self.q, self.k, self.v = (torch.zeros_like(t) for t in h.qkv(bs))

    def batch(self, seq_lens_cpu: list[int]) -> ForwardBatch:
        zeros = torch.zeros_like(self.seq_lens)
        fb = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=self.bs, input_ids=zeros, positions=zeros,
                          req_pool_indices=self.req_pool_indices, seq_lens=self.seq_lens,
                          out_cache_loc=self.out_cache_loc, seq_lens_cpu=seq_lens_cpu)
        fb.req_to_token_pool = self.h.req_to_token_pool
        fb.token_to_kv_pool = self.h.runners["flashinfer"].token_to_kv_pool
        fb.attn_backend = self.h.backends["flashinfer"]
        return fb

    def fill(self, fb: ForwardBatch, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> ForwardBatch:
        n = fb.batch_size
        self.req_pool_indices[n:].zero_()
        self.seq_lens[n:].fill_(1)
        self.out_cache_loc[n:].zero_()
        for static, real in ((self.req_pool_indices, fb.req_pool_indices), (self.seq_lens, fb.seq_lens),
                             (self.out_cache_loc, fb.out_cache_loc), (self.q, q), (self.k, k), (self.v, v)):
            static[:n].copy_(real)
        return self.batch(fb.seq_lens_cpu + [1] * (self.bs - n))


@pytest.mark.parametrize("q_heads,kv_heads", HEADS)
def test_decode_through_cuda_graph_with_padding(flashinfer_gpu: None, q_heads: int, kv_heads: int) -> None:
    torch.manual_seed(0)
    h = gpu_harness(q_heads, kv_heads)
    h.run(h.batch(ForwardMode.EXTEND, [0, 1, 2], [17, 300, 64]), BF16_TOL)
    backend = h.backends["flashinfer"]
    backend.init_cuda_graph_state(max_bs=8)
    static = GraphInputs(h, 8)
    fb = static.batch([1] * 8)
    backend.init_forward_metadata_capture_cuda_graph(fb)
    for _ in range(2):
        h.layer(static.q, static.k, static.v, fb)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = h.layer(static.q, static.k, static.v, fb)
    for rows in ([2, 0, 1], [1, 2], [2, 0, 1]):
        real = h.batch(ForwardMode.DECODE, rows, [1] * len(rows))
        q, k, v = h.qkv(len(rows))
        want = h.attend("torch_native", real, q, k, v)
        backend.init_forward_metadata_replay_cuda_graph(static.fill(real, q, k, v))
        graph.replay()
        torch.testing.assert_close(out[:len(rows)], want, **BF16_TOL)
        h.assert_pools_equal(h.layer.layer_id, skip_padding_slot=True)
    h.run(h.batch(ForwardMode.EXTEND, [3], [90]), BF16_TOL)  # eager forwards still work between replays
    h.run(h.batch(ForwardMode.DECODE, [3, 1], [1, 1]), BF16_TOL)


def test_tiny_model_logits_through_model_runner_cuda_graphs(flashinfer_gpu: None, tmp_path) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig

    from radixlm.layers.attention.flashinfer_backend import FlashInferAttnBackend
    from radixlm.model_executor.model_runner import ModelRunner
    from radixlm.server_args import ServerArgs

    cfg = LlamaConfig(hidden_size=512, intermediate_size=1024, num_attention_heads=4, num_key_value_heads=1,
                      num_hidden_layers=2, vocab_size=512, max_position_embeddings=1024,
                      architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(str(tmp_path))
    runners = {name: ModelRunner(ServerArgs(model_path=str(tmp_path), device="cuda", dtype="bfloat16",
                                            max_total_tokens=4096, cuda_graph_max_bs=8,
                                            attention_backend=name).resolved())
               for name in ("torch_native", "flashinfer")}
    assert isinstance(runners["flashinfer"].attn_backend, FlashInferAttnBackend)
    assert runners["flashinfer"].cuda_graph_runner is not None
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (3, 40, 129)]  # bs 3 replays bs 4
    builders = {name: ForwardBatchBuilder.for_runner(r) for name, r in runners.items()}
    rows = {name: r.req_to_token_pool.alloc(len(prompts)) for name, r in runners.items()}
    logits = {name: r.forward_logits(builders[name].extend(rows[name], [0] * 3, prompts)).next_token_logits
              for name, r in runners.items()}
    torch.testing.assert_close(logits["flashinfer"], logits["torch_native"], **BF16_TOL)
    seq_lens = [len(p) for p in prompts]
    for _ in range(4):
        tokens = logits["torch_native"].argmax(-1)
        logits = {name: r.forward_logits(builders[name].decode(rows[name], seq_lens, tokens)).next_token_logits
                  for name, r in runners.items()}
        torch.testing.assert_close(logits["flashinfer"], logits["torch_native"], **BF16_TOL)
        seq_lens = [n + 1 for n in seq_lens]
