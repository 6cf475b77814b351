"""benchmark/sim_kv_capacity.py: the real scheduler over a workload with a stand-in model (benchmark/stand_in.py),
at two pool sizes; the stand-ins are swapped in for one construction only."""

from __future__ import annotations

import random

import radixlm.managers.scheduler as scheduler_module
import radixlm.model_executor.model_runner as model_runner_module
from radixlm.benchmark import sim_kv_capacity as sim
from radixlm.benchmark import stand_in


def _workload(num: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    prompts = [[rng.randrange(100, 40000) for _ in range(rng.randint(20, 300))] for _ in range(num)]
    return prompts, [rng.randint(1, 64) for _ in range(num)]


def test_ample_pool_runs_everything_at_once_and_a_tight_one_takes_more_steps(smollm2_dir: str) -> None:
    prompts, outs = _workload(40)
    ample = sim.simulate(smollm2_dir, prompts, outs, capacity=100_000)
    # every prompt fits one prefill batch; each request's first token comes from its prefill, the rest
    # from decode steps over the whole batch, so the longest output sets the step count
    assert ample.prefill_batches == 1 and ample.max_batch == sum(n > 1 for n in outs)  # 1-token ones end at prefill
    assert ample.decode_steps == max(outs) - 1 and ample.output_tokens == sum(outs)
    tight = sim.simulate(smollm2_dir, prompts, outs, capacity=sum(map(len, prompts)) // 3)
    assert tight.output_tokens == sum(outs)  # all finished, and simulate checked that no slot leaked
    assert tight.prefill_batches > 1 and tight.max_batch < ample.max_batch and tight.decode_steps > ample.decode_steps
    assert tight.decode_rows == ample.decode_rows == sum(n - 1 for n in outs)  # each decode row is one token


def test_stand_ins_are_swapped_back() -> None:
    real = model_runner_module.ModelRunner, scheduler_module.SchedulerIO
    with stand_in.stand_ins():
        assert model_runner_module.ModelRunner is stand_in.StandInModelRunner
        assert scheduler_module.SchedulerIO is stand_in.SilentIO
    assert (model_runner_module.ModelRunner, scheduler_module.SchedulerIO) == real
