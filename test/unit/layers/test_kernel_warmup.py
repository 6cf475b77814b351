"""The triton backend's warm-up: one eager decode launch per compiled kernel variant.

A recorder stands in for the two Triton kernels (nothing runs), so the test sees what each
launch would specialize on: its constexprs, warps and stages, its tensors' dtypes and (where the
kernel keys on it) 16-byte alignment, and its integers' class (1, 16-divisible or other).
`decode_launch_variant` must tell launches apart exactly when those differ, and the warm-up must
launch every variant that 1..max_running_requests rows reach, whatever the alignment of the
batch's index arrays (a misaligned seq_lens once compiled a variant of its own mid-run).
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("radixlm_kernel")

import radixlm_kernel
from radixlm_kernel import decode_attention

from radixlm.layers.attention import triton_backend
from radixlm.layers.attention.base import create_attention_backend
from radixlm.mem_cache.memory_pool import MHATokenToKVPool, ReqToTokenPool


class Recorder:
    """`kernel[grid](*args, **kwargs)` that records what Triton would compile on instead of launching: the
    constexprs, warps, stages and PDL; each tensor's dtype and, unless the kernel leaves it out of its key
    (`any_alignment`), whether it is 16-byte aligned; each integer's class (1, 16-divisible or other)."""

    def __init__(self, name: str, kernel, any_alignment: tuple, log: list) -> None:
        self.name, self.log, self.any_alignment = name, log, set(any_alignment)
        self.params = list(inspect.signature(kernel.fn).parameters)

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            named = {**dict(zip(self.params, args)), **kwargs}
            spec = []
            for name, value in sorted(named.items()):
                if name.isupper() or name in ("num_warps", "num_stages", "launch_pdl"):
                    spec.append((name, value))
                elif isinstance(value, torch.Tensor):
                    spec.append((name, value.dtype, name in self.any_alignment or value.data_ptr() % 16 == 0))
                elif isinstance(value, int) and not isinstance(value, bool):
                    spec.append((name, value == 1, value % 16 == 0))
            self.log.append((self.name, tuple(spec)))
        return launch


@pytest.fixture
def recorded(monkeypatch):
    log: list = []
    monkeypatch.setattr(decode_attention, "_decode_split_kernel", Recorder(
        "split", decode_attention._decode_split_kernel, decode_attention.SPLIT_ANY_ALIGNMENT, log))
    monkeypatch.setattr(decode_attention, "_decode_merge_kernel", Recorder(
        "merge", decode_attention._decode_merge_kernel, decode_attention.MERGE_ANY_ALIGNMENT, log))
    return log


def runner(kv_dtype: torch.dtype, max_running_requests: int) -> SimpleNamespace:
    pool = MHATokenToKVPool(64, kv_dtype, 8, 64, 1, "cpu")
    config = SimpleNamespace(num_attention_heads=32, num_key_value_heads=8, head_dim=64)
    return SimpleNamespace(token_to_kv_pool=pool, req_to_token_pool=ReqToTokenPool(max_running_requests, 32, "cpu"),
                           model_config=config, device=torch.device("cpu"), dtype=torch.float32,
                           max_running_requests=max_running_requests)


def launch_spec(backend, model_runner, recorded: list, bs: int, offset: int = 0) -> tuple:
    """What an extend's last-query attention over `bs` rows launches. Its pool rows and lengths come as
    slices at `offset` elements into their arrays, as a batch's can (any 16-byte alignment)."""
    k_buf, v_buf = model_runner.token_to_kv_pool.get_kv_buffer(0)
    q = torch.zeros(bs, 32, 64)
    rows = torch.zeros(bs + offset, dtype=torch.int64)[offset:]
    seq_lens = torch.ones(bs + offset, dtype=torch.int64)[offset:]
    del recorded[:]
    req_to_token = model_runner.req_to_token_pool.req_to_token
    radixlm_kernel.decode_attention_fwd(q, k_buf, v_buf, torch.empty_like(q), req_to_token, rows, seq_lens,
                                        None, 1.0, max_kv_splits=backend._eager_splits(bs))
    return tuple(recorded)


@pytest.mark.parametrize("kv_dtype", [torch.float32, torch.float8_e4m3fn])
def test_variant_tells_launches_apart(recorded, kv_dtype):
    model_runner = runner(kv_dtype, 600)
    backend = create_attention_backend("triton", model_runner)
    backend.num_sms = 132  # an H200's, so that the split grid takes every class as rows grow
    by_variant: dict = {}
    for bs in range(1, 601):
        variant = radixlm_kernel.decode_launch_variant(bs, backend._eager_splits(bs), kv_dtype)
        by_variant.setdefault(variant, set()).add(launch_spec(backend, model_runner, recorded, bs, offset=bs % 3))
    assert all(len(specs) == 1 for specs in by_variant.values()), "one variant, two different launches"
    specs = [next(iter(s)) for s in by_variant.values()]
    assert len(set(specs)) == len(specs), "two variants, one launch: the warm-up would repeat a compile"
    assert len(specs) >= 3  # small-batch knobs, sized split grid with the fused merge, one split (direct)


def test_warm_up_launches_each_variant_once(recorded):
    model_runner = runner(torch.float32, 600)
    backend = create_attention_backend("triton", model_runner)
    backend.num_sms = 132
    wanted = {launch_spec(backend, model_runner, recorded, bs, offset=bs % 3) for bs in range(1, 601)}
    del recorded[:]
    launches = backend.warm_up(model_runner)
    split_launches = [entry for entry in recorded if entry[0] == "split"]
    assert launches == len(split_launches) == len(wanted)
    # group the recorded kernel calls back into launches: each starts with its split kernel
    got, current = set(), []
    for entry in recorded:
        if entry[0] == "split" and current:
            got.add(tuple(current))
            current = []
        current.append(entry)
    got.add(tuple(current))
    assert got == wanted


def test_other_backends_warm_nothing():
    model_runner = runner(torch.float32, 8)
    assert create_attention_backend("torch_native", model_runner).warm_up(model_runner) == 0
    assert triton_backend.EAGER_MAX_BS < 600  # the test above reaches the sized grid
