"""The tensor-parallel divergence guard, over a real 2-process gloo group.

Both ranks build real `ScheduleBatch`es; while they agree the guard passes (and checks only
every `interval` steps), and when rank 1 forms a different batch both ranks raise an error
that names rank 1. Also checks the input broadcast's empty fast path.
"""

from __future__ import annotations

import socket

import pytest
import torch.multiprocessing as mp

from radixlm.server_args import ServerArgs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_batch(rids: list[str], output_len: int) -> object:
    from radixlm.managers.schedule_batch import Req, ScheduleBatch
    from radixlm.model_executor.forward_batch import ForwardMode
    from radixlm.sampling.sampling_params import SamplingParams

    reqs = []
    for rid in rids:
        req = Req(rid, [1, 2, 3], SamplingParams(max_new_tokens=8), seed=0)
        req.output_ids = list(range(output_len))
        reqs.append(req)
    return ScheduleBatch(reqs=reqs, forward_mode=ForwardMode.DECODE)


def _rank_main(rank: int, port: int, results: dict) -> None:
    from radixlm import distributed as d
    from radixlm.managers.tp_consistency import TPConsistencyGuard, TPDivergenceError

    d.init_distributed(rank, 2, "gloo", f"tcp://127.0.0.1:{port}")
    results[f"empty{rank}"] = d.broadcast_pyobj([] if rank == 0 else ["ignored"])
    results[f"msgs{rank}"] = d.broadcast_pyobj(["a", 1] if rank == 0 else None)

    sparse = TPConsistencyGuard(ServerArgs(tp_size=2, tp_consistency_check_interval=3))
    for step in range(6):
        sparse.check(make_batch(["r1", "r2"], step))
    results[f"sparse_checks{rank}"] = sparse.checks

    guard = TPConsistencyGuard(ServerArgs(tp_size=2, enable_tp_consistency_check=True))
    guard.check(make_batch(["r1", "r2"], 4))
    try:
        guard.check(make_batch(["r1", "r2"], 4 if rank == 0 else 5))  # rank 1 has one more token
        results[f"error{rank}"] = None
    except TPDivergenceError as e:
        results[f"error{rank}"] = str(e)
    d.destroy_distributed()


@pytest.mark.timeout(120)
def test_guard_passes_agreeing_ranks_and_names_a_diverging_one() -> None:
    results = mp.Manager().dict()
    mp.spawn(_rank_main, args=(free_port(), results), nprocs=2, join=True)
    r = dict(results)
    assert r["empty0"] == [] and r["empty1"] is None  # idle steps: only the 8-byte size is sent
    assert r["msgs0"] == r["msgs1"] == ["a", 1]
    assert r["sparse_checks0"] == r["sparse_checks1"] == 3  # steps 1, 3 and 6
    for rank in range(2):
        assert r[f"error{rank}"] is not None
        assert "ranks [1] formed a different batch than ranks [0]" in r[f"error{rank}"]
