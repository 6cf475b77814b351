"""Sampler: greedy, masks (top-k/top-p/min-p, vocab mask), logit biases, penalties, seeded determinism,
distribution."""

from __future__ import annotations

import pytest
import torch

from radixlm.sampling import sampler as sampler_module
from radixlm.sampling.sampler import Sampler, filter_probs, uniform_noise
from radixlm.sampling.sampling_batch_info import SamplingBatchInfo


def info(bs: int, vocab: int, temperature: float = 1.0, top_k: int = -1, top_p: float = 1.0, min_p: float = 0.0,
         seed: int = 7, step: int = 0, **extra: object) -> SamplingBatchInfo:
    top_ks = torch.full((bs,), vocab if top_k <= 0 else top_k, dtype=torch.int64)
    return SamplingBatchInfo(
        temperatures=torch.full((bs, 1), temperature), top_ps=torch.full((bs,), top_p), top_ks=top_ks,
        min_ps=torch.full((bs,), min_p), seeds=torch.full((bs,), seed, dtype=torch.int64),
        steps=torch.full((bs,), step, dtype=torch.int64), is_all_greedy=temperature == 0,
        need_top_k_sampling=top_k > 0, need_top_p_sampling=top_p < 1.0, need_min_p_sampling=min_p > 0, **extra)


def test_greedy_is_argmax() -> None:
    logits = torch.randn(5, 100)
    assert torch.equal(Sampler()(logits, info(5, 100, temperature=0.0)), logits.argmax(-1))
    assert torch.equal(Sampler()(logits, None), logits.argmax(-1))


def test_precomputed_greedy_ids_are_used_unless_masks_or_penalties_change_the_logits() -> None:
    """A decode graph hands the sampler its argmax; the sampler takes it as the greedy token, and
    recomputes where a vocab mask or a penalty changes the logits first."""
    logits = torch.randn(3, 40)
    marker = torch.tensor([5, 6, 7])  # not the argmax: shows which one the sampler returned
    assert torch.equal(Sampler()(logits, None, marker), marker)
    assert torch.equal(Sampler()(logits, info(3, 40, temperature=0.0), marker), marker)
    mask = torch.ones(3, 40, dtype=torch.bool)
    mask[:, logits.argmax(-1)] = False
    masked = info(3, 40, temperature=0.0, vocab_mask=mask)
    assert torch.equal(Sampler()(logits, masked, marker), logits.masked_fill(~mask, -float("inf")).argmax(-1))
    counts = torch.zeros(3, 40)
    counts[:, 0] = 1.0
    penalised = info(3, 40, temperature=0.0, output_token_counts=counts, presence_penalties=torch.full((3, 1), 100.0))
    logits[:, 0] = 50.0  # the argmax until the presence penalty applies
    assert torch.equal(Sampler()(logits, penalised, torch.zeros(3, dtype=torch.int64)), logits[:, 1:].argmax(-1) + 1)


def test_top_k_one_is_greedy() -> None:
    logits = torch.randn(8, 300)
    for seed in range(5):
        assert torch.equal(Sampler()(logits, info(8, 300, temperature=1.5, top_k=1, seed=seed)), logits.argmax(-1))


def test_mixed_greedy_and_sampled_rows() -> None:
    logits = torch.randn(2, 50)
    batch = info(2, 50, temperature=1.0)
    batch.temperatures[0] = 0.0
    assert Sampler()(logits, batch)[0] == logits[0].argmax()


def test_seeded_sampling_is_a_pure_function_of_seed_and_step() -> None:
    logits = torch.randn(4, 1000)
    a = Sampler()(logits, info(4, 1000, seed=11, step=3))
    assert torch.equal(a, Sampler()(logits.clone(), info(4, 1000, seed=11, step=3)))
    draws = {tuple(Sampler()(logits, info(4, 1000, seed=s, step=t)).tolist()) for s in range(4) for t in range(4)}
    assert len(draws) > 8  # different seeds/steps give different draws


def test_noise_is_uniform_in_open_interval() -> None:
    u = uniform_noise(torch.arange(64), torch.zeros(64, dtype=torch.int64), 4096)
    assert u.min() > 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.01 and abs(u.var().item() - 1 / 12) < 0.01


def test_empirical_distribution_matches_softmax() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    n = 20000
    logits = probs.log().expand(n, 4)
    batch = info(n, 4)
    batch.seeds = torch.arange(n, dtype=torch.int64)  # n independent draws in one batch
    counts = torch.bincount(Sampler()(logits, batch), minlength=4).float() / n
    torch.testing.assert_close(counts, probs, atol=0.015, rtol=0.0)


def test_top_p_keeps_smallest_nucleus() -> None:
    probs = torch.tensor([[0.05, 0.5, 0.3, 0.15]])
    kept = filter_probs(probs, info(1, 4, top_p=0.7)) > 0
    assert kept.tolist() == [[False, True, True, False]]  # 0.5 + 0.3 reaches 0.7


def test_min_p_drops_tokens_below_fraction_of_max() -> None:
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
    kept = filter_probs(probs, info(1, 4, min_p=0.2)) > 0  # threshold 0.1
    assert kept.tolist() == [[True, True, True, False]]


def test_masked_tokens_are_never_sampled() -> None:
    logits = torch.zeros(200, 10)
    for batch in (info(200, 10, top_k=3), info(200, 10, min_p=0.5)):
        batch.seeds = torch.arange(200, dtype=torch.int64)
        logits = torch.tensor([3.0, 2.9, 2.8, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]).expand(200, 10)
        assert Sampler()(logits, batch).max() <= 2
    batch = info(200, 10, temperature=5.0)
    batch.seeds = torch.arange(200, dtype=torch.int64)
    batch.vocab_mask = torch.zeros(200, 10, dtype=torch.bool)
    batch.vocab_mask[:, 7] = True
    assert (Sampler()(torch.randn(200, 10), batch) == 7).all()


def test_penalties_change_greedy_choice() -> None:
    logits = torch.tensor([[2.0, 1.9, 0.0]])
    counts = torch.tensor([[3, 0, 0]], dtype=torch.int32)
    for name, value in (("frequency_penalties", 0.1), ("presence_penalties", 0.5), ("repetition_penalties", 1.2)):
        batch = info(1, 3, temperature=0.0, output_token_counts=counts, **{name: torch.tensor([[value]])})
        assert Sampler()(logits, batch).item() == 1, name


def test_large_batches_are_sampled_in_slices_with_the_same_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above SAMPLE_SLICE_ELEMENTS the draw runs a slice of rows at a time (bounded temporaries at any batch
    size); each row's token is a function of its own logits, parameters, seed and step, so it cannot change."""
    bs, vocab = 37, 200
    logits = torch.randn(bs, vocab)
    batch = info(bs, vocab, temperature=0.9, top_k=50, top_p=0.9, min_p=0.01)
    batch.seeds = torch.arange(bs, dtype=torch.int64) * 1000 + 3
    batch.steps = torch.arange(bs, dtype=torch.int64) % 5
    batch.temperatures[::4] = 0.0  # greedy rows spread over every slice
    batch.top_ps[1::3] = 0.5
    whole = Sampler()(logits, batch)
    monkeypatch.setattr(sampler_module, "SAMPLE_SLICE_ELEMENTS", 8 * vocab)  # slices of 8 rows, the last of 5
    sliced = Sampler()(logits, batch)
    assert torch.equal(sliced, whole)
    assert torch.equal(whole[::4], logits[::4].argmax(-1))
    assert len(set(whole[1::4].tolist())) > 1 and not torch.equal(whole, logits.argmax(-1))  # a real draw


def test_logit_bias_moves_greedy_and_sampled_choices() -> None:
    """+100 on one token makes it every row's choice, greedy or sampled; -100 on the argmax bans it; a zero row
    keeps its argmax, and the graph's precomputed argmax is not trusted once a bias is present."""
    logits = torch.randn(3, 60)
    bias = torch.zeros(3, 60)
    bias[0, 17] = 100.0
    bias[1, logits[1].argmax()] = -100.0
    biased_greedy = info(3, 60, temperature=0.0, logit_bias=bias)
    got = Sampler()(logits, biased_greedy, logits.argmax(-1))
    assert got[0] == 17 and got[1] != logits[1].argmax() and got[1] == (logits[1] + bias[1]).argmax()
    assert got[2] == logits[2].argmax()
    for seed in range(4):
        sampled = Sampler()(logits, info(3, 60, temperature=1.0, seed=seed, logit_bias=bias))
        assert sampled[0] == 17 and sampled[1] != logits[1].argmax()
