"""L2 weight prefetch: the plan's parsing and placement (CPU), the prefetch kernel, and a tiny Llama whose
decode steps (eager and CUDA-graph) give bit-identical logits with prefetching on and off (CUDA)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from radixlm.layers import weight_prefetch
from radixlm.layers.weight_prefetch import MB, PrefetchPlan, for_forward, layer_prefetches, parse_plan
from radixlm.model_executor.forward_batch import ForwardBatch, ForwardMode
from radixlm.models.llama import LlamaForCausalLM

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
COMMON = dict(hidden_size=128, intermediate_size=256, num_attention_heads=4, num_key_value_heads=2,
              num_hidden_layers=3, vocab_size=512, max_position_embeddings=1024)


def test_parse_plan() -> None:
    assert parse_plan("o_proj", 16) == PrefetchPlan(True, 0, 0, 16)
    assert parse_plan("o_proj, gate_up:16,qkv:0.5", 8) == PrefetchPlan(True, 16 * MB, MB // 2, 8)
    assert parse_plan("gate_up:4", 16) == PrefetchPlan(False, 4 * MB, 0, 16)
    assert parse_plan("o_proj,lines", 16) == PrefetchPlan(True, 0, 0, 16, "lines")
    for off in ("0", ""):
        assert parse_plan(off, 16).empty


@pytest.mark.parametrize("spec", ["o_proj:3", "gate_up", "qkv:x", "down:4"])
def test_parse_plan_rejects(spec: str) -> None:
    with pytest.raises(ValueError, match="RADIXLM_L2_PREFETCH"):
        parse_plan(spec, 16)


def test_layer_prefetches_place_each_weight() -> None:
    model = LlamaForCausalLM(LlamaConfig(**COMMON))
    layers = list(model.model.layers)
    plans = layer_prefetches(layers, PrefetchPlan(True, 2 * MB, MB, 16))
    for i, (layer, p) in enumerate(zip(layers, plans)):
        assert p.after_qkv == ((layer.self_attn.o_proj, None),)
        assert p.before_o_proj == ((layer.mlp.gate_up_proj, 2 * MB),)
        nxt = layers[i + 1].self_attn.qkv_proj if i + 1 < len(layers) else None
        assert p.before_down == (((nxt, MB),) if nxt is not None else ())
    assert all(p.empty for p in layer_prefetches(layers, PrefetchPlan(False, 0, 0, 16)))
    # held in plain tuples: the parameters are not registered twice
    assert len(dict(model.named_parameters())) == len(list(model.parameters()))
    assert not any("prefetch" in name for name in model.state_dict())


def _batch(mode: ForwardMode, bs: int) -> ForwardBatch:
    z = torch.zeros(bs, dtype=torch.int64)
    return ForwardBatch(forward_mode=mode, batch_size=bs, input_ids=z, positions=z, req_pool_indices=z,
                        seq_lens=z + 1, out_cache_loc=z, seq_lens_cpu=[1] * bs)


def test_for_forward_only_small_cuda_decodes() -> None:
    layer = layer_prefetches(list(LlamaForCausalLM(LlamaConfig(**COMMON)).model.layers),
                             PrefetchPlan(True, 0, 0, 4))[0]
    assert for_forward(layer, torch.zeros(2, 8), _batch(ForwardMode.DECODE, 2)) is None  # CPU tensors
    if torch.cuda.is_available():
        x = torch.zeros(2, 8, device="cuda")
        old, weight_prefetch._PLAN = weight_prefetch._PLAN, PrefetchPlan(True, 0, 0, 4)
        try:
            assert for_forward(layer, x, _batch(ForwardMode.DECODE, 4)) is layer
            assert for_forward(layer, x, _batch(ForwardMode.DECODE, 5)) is None
            assert for_forward(layer, x, _batch(ForwardMode.EXTEND, 1)) is None
        finally:
            weight_prefetch._PLAN = old


def test_l2_prefetch_cpu_and_bad_args() -> None:
    from radixlm_kernel.l2_prefetch import l2_prefetch

    assert l2_prefetch(torch.ones(1000)) is False  # nothing to do off the GPU
    with pytest.raises(ValueError, match="form"):
        l2_prefetch(torch.ones(4), form="tma")
    with pytest.raises(ValueError, match="max_bytes"):
        l2_prefetch(torch.ones(4), max_bytes=-1)


@CUDA
@pytest.mark.parametrize("form", ["bulk", "lines"])
@pytest.mark.parametrize("numel,max_bytes", [(7, None), (4096 * 4096, None), (3 * 1_000_003, 5_000_000), (64, 0)])
def test_l2_prefetch_leaves_tensor_unchanged(form: str, numel: int, max_bytes) -> None:
    from radixlm_kernel.l2_prefetch import l2_prefetch

    if torch.cuda.get_device_capability()[0] < (9 if form == "bulk" else 8):
        pytest.skip(f"{form} needs a newer GPU")
    t = torch.randn(numel, device="cuda", dtype=torch.bfloat16)
    before = t.clone()
    nbytes = min(numel * 2, max_bytes if max_bytes is not None else numel * 2)
    launched = l2_prefetch(t, max_bytes, form=form)
    torch.cuda.synchronize()
    assert launched == (nbytes >= (16 if form == "bulk" else 1))
    assert torch.equal(t, before)


def _decode_logits(folder: str, prompts: list[list[int]], plan: PrefetchPlan, monkeypatch: pytest.MonkeyPatch,
                   disable_graph: bool) -> tuple[list[list[int]], list[torch.Tensor]]:
    from radixlm.model_executor.forward_batch_builder import generate_static_batch
    from radixlm.model_executor.model_runner import ModelRunner
    from radixlm.server_args import ServerArgs

    monkeypatch.setattr(weight_prefetch, "_PLAN", plan)
    runner = ModelRunner(ServerArgs(model_path=folder, device="cuda", dtype="bfloat16", max_total_tokens=4096,
                                    cuda_graph_max_bs=4, disable_cuda_graph=disable_graph).resolved())
    logits: list[torch.Tensor] = []
    forward_logits = runner.forward_logits

    def record(fb):
        out = forward_logits(fb)
        logits.append(out.next_token_logits.clone())
        return out

    runner.forward_logits = record
    return generate_static_batch(runner, prompts, 8), logits


@CUDA
@pytest.mark.parametrize("disable_graph", [False, True])
def test_tiny_llama_prefetch_on_off_identical(tmp_path, monkeypatch: pytest.MonkeyPatch, disable_graph: bool) -> None:
    import radixlm_kernel.l2_prefetch as kernel

    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(LlamaConfig(**COMMON, architectures=["LlamaForCausalLM"]),
                                     dtype=torch.float32).save_pretrained(str(tmp_path))
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 512, (n,), generator=g).tolist() for n in (3, 40, 129)]
    launched = []
    fn = kernel.l2_prefetch
    monkeypatch.setattr(kernel, "l2_prefetch", lambda *a, **kw: launched.append(fn(*a, **kw)))
    on = _decode_logits(str(tmp_path), prompts, PrefetchPlan(True, 64 * 1024, 32 * 1024, 4), monkeypatch,
                        disable_graph)
    assert launched and all(launched)  # every decode layer forked its three prefetches (sm90)
    launched.clear()
    off = _decode_logits(str(tmp_path), prompts, PrefetchPlan(False, 0, 0, 4), monkeypatch, disable_graph)
    assert not launched
    assert on[0] == off[0]
    for a, b in zip(on[1], off[1]):
        assert torch.equal(a, b)
