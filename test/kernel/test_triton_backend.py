"""The `triton` attention backend against `torch_native`, on real pools and ForwardBatches.

Three requests go through a prefill, a chunked extend over their cached prefixes (one
request with no new prefix joins), then decode steps whose contexts cross a KV split;
the decode steps also run through the CUDA-graph metadata hooks (static buffers), as a
graph replay would. Each backend writes into its own pool; outputs and pools must agree.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from radixlm.layers.attention.base import create_attention_backend
from radixlm.layers.radix_attention import RadixAttention
from radixlm.mem_cache.allocator import TokenToKVPoolAllocator
from radixlm.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool
from radixlm.model_executor.forward_batch import ForwardBatch, ForwardMode

Q_HEADS, KV_HEADS, HEAD_DIM, LAYERS = 4, 1, 32, 2


class Harness:
    """One request table and allocator; two KV pools, one per backend."""

    def __init__(self, device: str, dtype: torch.dtype, rows: int = 4) -> None:
        self.device, self.dtype = device, dtype
        self.req_to_token_pool = ReqToTokenPool(rows, 512, device)
        self.allocator = TokenToKVPoolAllocator(1024, device)
        self.runners = {name: self._runner() for name in ("torch_native", "triton")}
        self.backends = {name: create_attention_backend(name, r) for name, r in self.runners.items()}
        self.layer = RadixAttention(Q_HEADS, HEAD_DIM, HEAD_DIM ** -0.5, KV_HEADS, layer_id=1)
        self.lens: dict[int, int] = {}  # req_to_token row -> tokens cached

    def _runner(self) -> SimpleNamespace:
        pool = MHATokenToKVPool(1024, self.dtype, KV_HEADS, HEAD_DIM, LAYERS, self.device)
        config = SimpleNamespace(num_attention_heads=Q_HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM)
        return SimpleNamespace(token_to_kv_pool=pool, req_to_token_pool=self.req_to_token_pool,
                               model_config=config, device=torch.device(self.device))

    def share(self, src: int, dst: int, n: int) -> None:
        """Row `dst` starts with the first `n` slots of row `src`, as a radix-cache hit hands out."""
        self.req_to_token_pool.write(dst, 0, self.req_to_token_pool.req_to_token[src, :n].long())
        self.lens[dst] = n

    def batch(self, mode: ForwardMode, rows: list[int], new: list[int]) -> ForwardBatch:
        prefix = [self.lens.get(r, 0) for r in rows]
        locs = []
        for row, p, n in zip(rows, prefix, new):
            loc = self.allocator.alloc(n)
            self.req_to_token_pool.write(row, p, loc)
            self.lens[row] = p + n
            locs.append(loc)
        seq = [p + n for p, n in zip(prefix, new)]
        positions = torch.cat([torch.arange(p, p + n) for p, n in zip(prefix, new)]).to(self.device)
        as_t = lambda xs: torch.tensor(xs, dtype=torch.int64, device=self.device)  # noqa: E731
        fb = ForwardBatch(forward_mode=mode, batch_size=len(rows), input_ids=torch.zeros_like(positions),
                          positions=positions, req_pool_indices=as_t(rows), seq_lens=as_t(seq),
                          out_cache_loc=torch.cat(locs).long(), seq_lens_cpu=seq)
        if mode.is_extend():
            fb.extend_prefix_lens, fb.extend_seq_lens = as_t(prefix), as_t(new)
            fb.extend_prefix_lens_cpu, fb.extend_seq_lens_cpu = prefix, new
        fb.req_to_token_pool = self.req_to_token_pool
        return fb

    def run(self, fb: ForwardBatch, tol: dict, graph_hook: str = "") -> None:
        n = fb.num_tokens
        q = torch.randn(n, Q_HEADS * HEAD_DIM, device=self.device, dtype=self.dtype)
        k = torch.randn(n, KV_HEADS * HEAD_DIM, device=self.device, dtype=self.dtype)
        v = torch.randn(n, KV_HEADS * HEAD_DIM, device=self.device, dtype=self.dtype)
        outs = {}
        for name, backend in self.backends.items():
            fb.token_to_kv_pool, fb.attn_backend = self.runners[name].token_to_kv_pool, backend
            if name == "triton" and graph_hook:
                getattr(backend, f"init_forward_metadata_{graph_hook}_cuda_graph")(fb)
                backend.init_forward_metadata_in_graph(fb)  # what the captured graph runs each replay
            else:
                backend.init_forward_metadata(fb)
            outs[name] = self.layer(q, k, v, fb)
        torch.testing.assert_close(outs["triton"], outs["torch_native"], **tol)
        pools = [self.runners[name].token_to_kv_pool for name in ("triton", "torch_native")]
        assert torch.equal(pools[0].k_buffer[1], pools[1].k_buffer[1])
        assert torch.equal(pools[0].v_buffer[1], pools[1].v_buffer[1])


def test_triton_backend_matches_torch_native(device: str, dtype: torch.dtype, tol: dict) -> None:
    torch.manual_seed(0)
    h = Harness(device, dtype)
    h.run(h.batch(ForwardMode.EXTEND, [2, 0, 1], [30, 7, 250]), tol)  # prefill, no prefix
    h.run(h.batch(ForwardMode.EXTEND, [2, 0, 1, 3], [5, 1, 20, 9]), tol)  # over cached prefixes; row 3 is new
    h.run(h.batch(ForwardMode.DECODE, [2, 0, 1, 3], [1, 1, 1, 1]), tol)  # row 1 has 271 tokens: 4 KV splits
    triton = h.backends["triton"]
    triton.init_cuda_graph_state(max_bs=8)
    h.run(h.batch(ForwardMode.DECODE, [2, 0, 1, 3], [1, 1, 1, 1]), tol, graph_hook="capture")
    splits_at_capture = triton.cuda_graph_num_kv_splits
    h.run(h.batch(ForwardMode.DECODE, [2, 0, 1, 3], [1, 1, 1, 1]), tol, graph_hook="replay")
    assert triton.cuda_graph_num_kv_splits is splits_at_capture  # the graph's static buffer is never replaced


def test_mixed_batch_one_token_rows_take_the_decode_kernel(device: str, dtype: torch.dtype, tol: dict) -> None:
    """A MIXED batch (a prefill, then the running decodes with one new token each) and an extend whose last row
    has one token: the one-token tail goes through the decode kernel (with KV splits, row 1's 271 tokens
    cross several), the rest through the extend kernel; both match torch_native, and so do the pools."""
    from radixlm.layers.attention.triton_backend import ExtendMetadata

    torch.manual_seed(3)
    h = Harness(device, dtype)
    h.run(h.batch(ForwardMode.EXTEND, [2, 0, 1], [30, 7, 250]), tol)
    triton = h.backends["triton"]
    cases = [(ForwardMode.MIXED, [3, 2, 0, 1], [40, 1, 1, 1], 1), (ForwardMode.MIXED, [2, 0, 1, 3], [1, 1, 1, 1], 0),
             (ForwardMode.EXTEND, [3, 1], [9, 1], 1), (ForwardMode.MIXED, [3, 0], [12, 3], 2)]
    for mode, rows, new, prefill_rows in cases:
        h.run(h.batch(mode, rows, new), tol)
        meta = triton.forward_metadata
        assert isinstance(meta, ExtendMetadata) and meta.prefill_rows == prefill_rows
        assert meta.max_len_extend == max(new[:prefill_rows], default=0)
    # eager decode launches of up to 16 rows share one split grid (one compiled variant); larger ones are sized
    assert {triton._eager_splits(bs) for bs in range(1, 17)} == {32}
    assert triton._eager_splits(64) == triton._grid_splits(64) < 32


def test_warm_up_runs_each_eager_variant_and_leaves_the_pool(device: str, dtype: torch.dtype, tol: dict) -> None:
    """The startup warm-up launches the real decode kernel once per variant that 1..max_running_requests
    rows reach (here the small-batch grid, the sized grid and one split), and only reads the pool."""
    import radixlm_kernel

    h = Harness(device, dtype)
    h.run(h.batch(ForwardMode.EXTEND, [0], [20]), tol)  # something in the pool to leave untouched
    runner, triton = h.runners["triton"], h.backends["triton"]
    triton.num_sms = 8  # the CPU's stand-in count, on the GPU too: 80 rows then reach all three grids
    runner.max_running_requests, runner.dtype = 80, dtype
    pool = runner.token_to_kv_pool
    before = [b.clone() for b in pool.k_buffer + pool.v_buffer]
    variants = {radixlm_kernel.decode_launch_variant(bs, triton._eager_splits(bs), pool.dtype) for bs in range(1, 81)}
    assert len(variants) >= 3
    assert triton.warm_up(runner) == len(variants)
    assert all(torch.equal(a, b) for a, b in zip(before, pool.k_buffer + pool.v_buffer))


def test_registered_under_triton() -> None:
    from radixlm.layers.attention.base import ATTENTION_BACKENDS
    from radixlm.layers.attention.triton_backend import TritonAttnBackend

    assert ATTENTION_BACKENDS["triton"] is TritonAttnBackend


def test_capture_requires_graph_state(device: str, dtype: torch.dtype) -> None:
    h = Harness(device, dtype)
    with pytest.raises(RuntimeError, match="init_cuda_graph_state"):
        h.backends["triton"].init_forward_metadata_capture_cuda_graph(
            h.batch(ForwardMode.DECODE, [0], [1]))


def test_unsplit_decode(device: str, dtype: torch.dtype, tol: dict) -> None:
    """A batch that fills the GPU unsplit (here: no SMs to fill) writes its output from the split kernel,
    with no merge pass; torch_native's result, eager and through the graph hooks."""
    torch.manual_seed(5)
    h = Harness(device, dtype)
    triton = h.backends["triton"]
    triton.num_sms = 0
    h.run(h.batch(ForwardMode.EXTEND, [2, 0, 1, 3], [40, 7, 70, 64]), tol)
    assert triton._grid_splits(4) == 1
    h.run(h.batch(ForwardMode.DECODE, [2, 0, 1, 3], [1, 1, 1, 1]), tol)
    triton.init_cuda_graph_state(max_bs=8)
    h.run(h.batch(ForwardMode.DECODE, [2, 0, 1, 3], [1, 1, 1, 1]), tol, graph_hook="capture")


def test_cascade_decode_matches_torch_native(device: str, dtype: torch.dtype, tol: dict) -> None:
    """A decode batch of 20: 18 requests share a 300-token cached prefix (two cascade blocks at
    GQA 4), two share nothing. Eager, then through the graph hooks, against torch_native."""
    torch.manual_seed(7)
    h = Harness(device, dtype, rows=24)
    triton = h.backends["triton"]
    h.run(h.batch(ForwardMode.EXTEND, [0, 18, 19], [300, 40, 270]), tol)
    for row in range(1, 18):
        h.share(0, row, 300)
    rows = list(range(20))
    h.run(h.batch(ForwardMode.EXTEND, rows[1:18], [1 + r % 4 for r in rows[1:18]]), tol)
    fb = h.batch(ForwardMode.DECODE, rows, [1] * 20)
    h.run(fb, tol)
    plan = triton.forward_metadata.cascade
    assert plan is not None and plan.num_blocks.item() == 2
    assert sorted(plan.pre_len.tolist()) == [0, 0] + [300] * 18
    triton.init_cuda_graph_state(max_bs=24)
    h.run(h.batch(ForwardMode.DECODE, rows, [1] * 20), tol, graph_hook="capture")
    assert triton.forward_metadata.cascade is not None
    h.run(h.batch(ForwardMode.DECODE, rows, [1] * 20), tol, graph_hook="replay")
    triton.cascade_enabled = False
    h.run(h.batch(ForwardMode.DECODE, rows, [1] * 20), tol)
    assert triton.forward_metadata.cascade is None


def test_decode_rope_matches_torch_native(device: str, dtype: torch.dtype, tol: dict) -> None:
    """Decode with the rotary embedding and the KV store inside the attention kernel (`rope=`) against
    torch_native given q/k rotated by the layer's reference rotation; eager and through the graph hooks.
    Cascade-sized batches keep the separate rotary kernel."""
    from radixlm.layers.rotary_embedding import RotaryEmbedding

    torch.manual_seed(3)
    h = Harness(device, dtype, rows=24)
    rope = RotaryEmbedding(HEAD_DIM, HEAD_DIM, 1024, 10000.0).to(device)
    h.run(h.batch(ForwardMode.EXTEND, [2, 0, 1], [30, 7, 250]), tol)
    triton = h.backends["triton"]
    triton.init_cuda_graph_state(max_bs=8)
    for hook in ("", "capture", "replay"):
        fb = h.batch(ForwardMode.DECODE, [2, 0, 1], [1, 1, 1])
        q, k, v = (torch.randn(3, n * HEAD_DIM, device=device, dtype=dtype) for n in (Q_HEADS, KV_HEADS, KV_HEADS))
        fb.token_to_kv_pool, fb.attn_backend = h.runners["triton"].token_to_kv_pool, triton
        if hook:
            getattr(triton, f"init_forward_metadata_{hook}_cuda_graph")(fb)
            triton.init_forward_metadata_in_graph(fb)
        else:
            triton.init_forward_metadata(fb)
        assert h.layer.takes_rope(fb)
        out = h.layer(q, k, v, fb, rope=rope)
        fb.token_to_kv_pool, fb.attn_backend = h.runners["torch_native"].token_to_kv_pool, h.backends["torch_native"]
        h.backends["torch_native"].init_forward_metadata(fb)
        assert not h.layer.takes_rope(fb)
        q_rot, k_rot = rope.forward_native(fb.positions, q, k)
        ref = h.layer(q_rot, k_rot, v, fb)
        torch.testing.assert_close(out, ref, **tol)
        pools = [h.runners[name].token_to_kv_pool for name in ("triton", "torch_native")]
        slots = fb.out_cache_loc
        torch.testing.assert_close(pools[0].k_buffer[1][slots], pools[1].k_buffer[1][slots], **tol)
        assert torch.equal(pools[0].v_buffer[1][slots], pools[1].v_buffer[1][slots])
    fb = h.batch(ForwardMode.DECODE, list(range(20)), [1] * 20)
    fb.attn_backend = triton
    assert triton.cascade_enabled and not h.layer.takes_rope(fb)  # 20 rows: the cascade's batch size
