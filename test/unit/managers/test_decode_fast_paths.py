"""The decode fast paths change nothing: a persistent decode batch (tensors advanced instead of
rebuilt, the previous batch's tokens as input ids) and the steady result path (appends only).

The real Scheduler runs a tiny random Llama (real ModelRunner on the CPU, SmolLM2's tokenizer)
in-process: requests are handed in up front, and the loop stops when the scheduler would wait
for input. A mixed workload (greedy and seeded sampling with top-k/top-p, EOS and stop tokens,
min_new_tokens, streaming, logprobs, staggered lengths, chunked prefills, aborts) must send
exactly the same messages to the detokenizer with the fast paths on as with them off (every
decode batch rebuilt from the requests, every row checked): in the plain loop under retraction,
in the overlap loop, and with mixed chunks. Every decode batch must keep the ForwardBatch
contract, and no KV slot may leak. Prefills launched beside an in-flight decode (the overlap
loop's default) give every request the same tokens as prefills after a drain.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

import radixlm.managers.forward_batch_builder as builder_module
from radixlm import environ
import radixlm.managers.scheduler as scheduler_module
from radixlm.managers.io_struct import AbortReq, TokenizedGenerateReqInput
from radixlm.managers.forward_thread import ForwardThread
from radixlm.managers.steady_decode import SteadyDecode
from radixlm.model_executor.forward_batch import ForwardBatch
from radixlm.sampling.sampling_params import SamplingParams
from radixlm.server_args import ServerArgs

VOCAB = 512
ABORTS = {22: "r12", 40: "r8"}  # loop iteration -> the request aborted then (running, in the overlap loop in flight)
EOS = 2  # LlamaConfig's default eos_token_id
# Tokens these requests produce (the random model is seeded): r5's first one comes before its
# min_new_tokens, so only the second finishes it
STOP_TOKEN_IDS = {5: [152], 7: [441, 176], 10: [458]}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = str(tmp_path_factory.mktemp("tiny_llama_decode"))
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                      num_hidden_layers=2, vocab_size=VOCAB, max_position_embeddings=512, eos_token_id=EOS,
                      architectures=["LlamaForCausalLM"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


class SchedulerIdle(Exception):
    pass


class InProcessIO:
    """The scheduler's sockets, in-process: inputs queued by the test; outputs recorded; the loop
    ends (SchedulerIdle) when the scheduler would block waiting for input."""

    def __init__(self, port_args: Any, tp_rank: int) -> None:
        self.inbox: list[Any] = []
        self.sent: list[Any] = []
        self.steps = 0
        self.abort_at: dict[int, AbortReq] = {}  # loop iteration -> abort delivered then
        self.arrive_at: dict[int, Any] = {}  # loop iteration -> a request arriving then (or once idle)

    def recv_requests(self, block: bool = False) -> list[Any]:
        self.steps += 1
        if self.steps in self.abort_at:
            self.inbox.append(self.abort_at.pop(self.steps))
        if self.steps in self.arrive_at:
            self.inbox.append(self.arrive_at.pop(self.steps))
        if block and not self.inbox and self.arrive_at:
            self.inbox.append(self.arrive_at.pop(min(self.arrive_at)))
        if block and not self.inbox:
            raise SchedulerIdle
        msgs, self.inbox = self.inbox, []
        return msgs

    def send_to_detokenizer(self, msg: Any) -> None:
        self.sent.append(msg)

    send_to_tokenizer = send_to_detokenizer

    def has_input(self) -> bool:
        """What the overlap loop polls while it waits for a decode (one rank, CUDA): a request is due."""
        return self.steps + 1 in self.arrive_at


def check_decode_contract(fb: ForwardBatch) -> None:
    """What every decode ForwardBatch promises the model, however it was built."""
    table = fb.req_to_token_pool.req_to_token
    assert torch.equal(table[fb.req_pool_indices, fb.positions].long(), fb.out_cache_loc.long())
    assert torch.equal(fb.seq_lens, fb.positions + 1)
    assert fb.seq_lens.tolist() == fb.seq_lens_cpu
    assert fb.input_ids.dtype == torch.int64 and fb.input_ids.shape == (fb.batch_size,)
    assert fb.sampling_info.steps.shape == (fb.batch_size,)


def workload() -> list[TokenizedGenerateReqInput]:
    reqs = []
    for i in range(14):
        params = SamplingParams(
            max_new_tokens=[6, 30, 17, 40, 9, 25, 33, 12, 40, 21, 28, 8, 36, 19][i],
            temperature=[0.0, 0.8, 1.0, 0.0, 0.7][i % 5],
            top_k=[-1, 20, -1, 50, -1][i % 5], top_p=[1.0, 0.9, 1.0, 1.0, 0.8][i % 5],
            ignore_eos=i % 3 == 0, min_new_tokens=4 if i == 5 else 0,
            stop_token_ids=STOP_TOKEN_IDS.get(i),
        ).normalize()
        ids = [(i * 37 + j * 11) % (VOCAB - 10) + 5 for j in range(12 + 5 * i)]
        reqs.append(TokenizedGenerateReqInput(rid=f"r{i}", input_ids=ids, sampling_params=params,
                                              stream=i in (2, 9), return_logprob=i == 4, top_logprobs_num=2 * (i == 4)))
    return reqs


def run(tiny_dir: str, tokenizer_dir: str, monkeypatch: pytest.MonkeyPatch, loop: dict,
        fast: bool, late: Optional[dict[int, str]] = None) -> tuple[list[dict], dict]:
    """`late`: loop iteration -> the rid that arrives then instead of up front."""
    counts = {"advanced": 0, "steady": 0, "decodes": 0, "lagged": 0}
    with monkeypatch.context() as m:
        m.setattr(scheduler_module, "SchedulerIO", InProcessIO)
        submit = ForwardThread.submit

        def counting_submit(self: ForwardThread, forward_batch: ForwardBatch, resolve: Any, *rest: Any) -> Any:
            counts["lagged"] += resolve is not None  # launched before the previous batch's tokens are known
            return submit(self, forward_batch, resolve, *rest)

        m.setattr(ForwardThread, "submit", counting_submit)
        advance, try_append = builder_module.advance_decode, SteadyDecode.try_append
        if fast:
            def counting_advance(*args: Any) -> ForwardBatch:
                counts["advanced"] += 1
                return advance(*args)

            def counting_append(self: SteadyDecode, *args: Any) -> bool:
                appended = try_append(self, *args)
                counts["steady"] += appended
                return appended

            m.setattr(builder_module, "advance_decode", counting_advance)
            m.setattr(SteadyDecode, "try_append", counting_append)
        else:  # the reference: every decode rebuilt from the requests, every row checked
            m.setattr(builder_module.PersistentDecodeBatch, "build",
                      lambda self, batch, offsets=None: builder_module.build_decode(batch, self.vocab_size,
                                                                                    self.device, offsets))
            m.setattr(SteadyDecode, "plan", classmethod(lambda cls, reqs: None))
        args = ServerArgs(**{**dict(model_path=tiny_dir, tokenizer_path=tokenizer_dir, device="cpu", dtype="float32",
                                    max_running_requests=8, chunked_prefill_size=16, random_seed=7,
                                    schedule_conservativeness=0.1, log_level="warning"), **loop}).resolved()
        scheduler = scheduler_module.Scheduler(args, port_args=None)
        forward = scheduler.model_runner.forward

        def checked_forward(fb: ForwardBatch) -> Any:
            if fb.forward_mode.is_decode():
                counts["decodes"] += 1
                scheduler.model_runner.attach(fb)
                check_decode_contract(fb)
            return forward(fb)

        scheduler.model_runner.forward = checked_forward
        arrivals = {rid: step for step, rid in (late or {}).items()}
        for req in workload():
            if req.rid in arrivals:
                scheduler.io.arrive_at[arrivals[req.rid]] = req
            else:
                scheduler.io.inbox.append(req)
        scheduler.io.abort_at.update({step: AbortReq(rid=rid) for step, rid in ABORTS.items()})
        with pytest.raises(SchedulerIdle):
            scheduler.event_loop_normal() if args.disable_overlap_schedule else scheduler.event_loop_overlap()
        assert scheduler.kv.check_idle(), scheduler.kv.leak_message
        messages = [dict(rids=msg.rids, new_output_ids=msg.new_output_ids, metas=msg.metas, logprobs=msg.logprobs,
                         detokenize_params=msg.detokenize_params) for msg in scheduler.io.sent]
        counts["retractions"] = scheduler.stats.num_retractions
        counts["beside"] = scheduler.stats.prefills_beside_decode
        counts["lagged_for_frees"] = scheduler.stats.lagged_for_frees
        counts["paced"] = scheduler.stats.paced_holds
        return messages, counts


LOOPS = {  # prompts are prefilled in chunks of 16 tokens, between decodes of the running requests
    "plain-retracting": dict(disable_overlap_schedule=True, max_total_tokens=220),  # decode retracts
    "overlap": dict(disable_overlap_schedule=False, max_total_tokens=2000),  # room to lag
    # tight enough that a chunk sometimes waits for memory while the decodes go on (a MIXED batch, then
    # a decode of the same requests: the persistent batch must be rebuilt)
    "plain-mixed-chunk": dict(disable_overlap_schedule=True, enable_mixed_chunk=True, max_total_tokens=260),
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("loop", list(LOOPS))
def test_fast_paths_send_exactly_what_rebuilding_sends(tiny_dir: str, smollm2_dir: str,
                                                       monkeypatch: pytest.MonkeyPatch, loop: str) -> None:
    fast, counts = run(tiny_dir, smollm2_dir, monkeypatch, LOOPS[loop], fast=True)
    reference, _ = run(tiny_dir, smollm2_dir, monkeypatch, LOOPS[loop], fast=False)
    assert fast == reference
    finished = {rid: reason for msg in fast for rid, reason in zip(msg["rids"], msg["metas"].finish_reasons)
                if reason is not None}
    assert len(finished) == 14
    assert all(finished[rid]["type"] == "abort" for rid in ABORTS.values())
    assert {r["type"] for r in finished.values()} >= {"length", "stop", "abort"}
    if "retracting" in loop:
        assert counts["retractions"] > 0, counts
    if loop == "overlap":
        assert counts["lagged"] > counts["decodes"] // 3, counts
    # the fast paths really ran (not just the rebuild fallbacks)
    assert counts["advanced"] > counts["decodes"] // 3 and counts["steady"] > 0, counts


def outputs_by_rid(messages: list[dict]) -> dict[str, tuple[list[int], str]]:
    """Each request's whole output and finish type, from the increments the detokenizer was sent."""
    ids: dict[str, list[int]] = {}
    finish: dict[str, str] = {}
    for msg in messages:
        for rid, new, reason in zip(msg["rids"], msg["new_output_ids"], msg["metas"].finish_reasons):
            ids.setdefault(rid, []).extend(new)
            if reason is not None:
                finish[rid] = reason["type"]
    return {rid: (ids[rid], finish.get(rid, "")) for rid in ids}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("device", ["cpu", "cpu-paced", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CUDA: the prefill's own stream, the arrival watch, decode pacing"))])
def test_prefill_beside_decode_gives_the_drained_outputs(tiny_dir: str, request: pytest.FixtureRequest,
                                                         monkeypatch: pytest.MonkeyPatch, device: str) -> None:
    # a GPU machine may lack the embedded model: RADIXLM_TEST_TOKENIZER names another tokenizer folder
    smollm2_dir = environ.test_tokenizer_path() or request.getfixturevalue("smollm2_dir")
    # four requests arrive while the others decode; request rows to spare (a finished request's row stays
    # taken until the decode in flight is done)
    loop = dict(LOOPS["overlap"], max_running_requests=16, chunked_prefill_size=64, device=device.split("-")[0])
    late = {18: "r9", 26: "r10", 33: "r11", 47: "r13"}
    if device != "cpu":  # decode pacing is opt-in: forced on (a margin) on the CPU, "auto" on CUDA
        monkeypatch.setenv("RADIXLM_DECODE_PACING", "0.2" if device == "cpu-paced" else "auto")
    beside, counts = run(tiny_dir, smollm2_dir, monkeypatch, loop, fast=True, late=late)
    monkeypatch.setenv("RADIXLM_PREFILL_BESIDE_DECODE", "0")
    drained, off_counts = run(tiny_dir, smollm2_dir, monkeypatch, loop, fast=True, late=late)
    assert counts["beside"] > 0 and off_counts["beside"] == 0, (counts, off_counts)
    assert off_counts["paced"] == 0, off_counts
    if device != "cuda":  # on CUDA, "auto" holds a launch only when a decode step outlasts its build and
        # margin; this 2-layer model's steps did not on an H100 (twenty-fourth session: no hold), so there
        # the test checks only that pacing leaves the outputs alone
        assert (counts["paced"] > 0) == (device == "cpu-paced"), counts
    got, want = outputs_by_rid(beside), outputs_by_rid(drained)
    assert set(got) == set(want) and len(got) == 14
    for rid in want:  # aborts land at a loop iteration, which the two loops reach at different steps
        if rid in ABORTS.values():
            assert got[rid][1] == want[rid][1] == "abort"
        else:
            assert got[rid] == want[rid], rid


@pytest.mark.timeout(600)
def test_step_trace_records_every_batch(tiny_dir: str, smollm2_dir: str, monkeypatch: pytest.MonkeyPatch,
                                        tmp_path: Path) -> None:
    """RADIXLM_STEP_TRACE: one line per batch the overlap loop ran, with its host times, and a summary table."""
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv("RADIXLM_STEP_TRACE", str(trace))
    _, counts = run(tiny_dir, smollm2_dir, monkeypatch, LOOPS["overlap"], fast=True)
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    kinds = [r["kind"] for r in records]
    assert kinds.count("decode") == counts["decodes"] and "extend" in kinds
    prefilled = sum(r["new_tokens"] for r in records if r["kind"] == "extend")
    assert 0 < prefilled <= sum(len(req.input_ids) for req in workload())  # less the prefix-cache hits
    assert all(r["new_tokens"] == r["bs"] for r in records if r["kind"] == "decode")
    for r in records:
        assert r["build_ms"] >= 0 and r["wait_ms"] >= 0 and r["process_ms"] >= 0 and r["bs"] >= 1
        assert r["gpu_ms"] is None and r["bubble_ms"] is None  # device times only on CUDA
    assert all(b["t"] >= a["t"] for a, b in zip(records, records[1:]))
    script = Path(__file__).resolve().parents[3] / "benchmark" / "step_trace_summary.py"
    table = subprocess.run([sys.executable, str(script), str(trace)], capture_output=True, text=True, check=True)
    rows = {line.split("|")[1].strip(): line for line in table.stdout.splitlines()[2:]}
    assert {"extend", "decode"} <= set(rows), table.stdout
    assert f"| decode | {kinds.count('decode') - (kinds[0] == 'decode')} |" in rows["decode"]


@pytest.mark.timeout(600)
def test_prefill_waiting_for_releases_lags_one_decode_and_runs_beside(tiny_dir: str, smollm2_dir: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # a pool too small for the workload: waiting requests are admitted as finished ones release their
    # slots, and those releases wait on the decode in flight. The loop lags one decode for them (instead
    # of draining) and the prefill then runs beside the next decode, with the drained loop's outputs.
    loop = dict(LOOPS["overlap"], max_running_requests=16, chunked_prefill_size=64, max_total_tokens=320)
    beside, counts = run(tiny_dir, smollm2_dir, monkeypatch, loop, fast=True)
    monkeypatch.setenv("RADIXLM_PREFILL_BESIDE_DECODE", "0")
    drained, off_counts = run(tiny_dir, smollm2_dir, monkeypatch, loop, fast=True)
    assert counts["lagged_for_frees"] > 0 and counts["beside"] > 0 and counts["retractions"] > 0, counts
    assert off_counts["lagged_for_frees"] == off_counts["beside"] == 0, off_counts
    got, want = outputs_by_rid(beside), outputs_by_rid(drained)
    assert set(got) == set(want) and len(got) == 14
    for rid in set(want) - set(ABORTS.values()):
        assert got[rid] == want[rid], rid
