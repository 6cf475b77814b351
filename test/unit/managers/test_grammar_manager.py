"""The scheduler's grammar queue with the real xgrammar backend and SmolLM2's tokenizer: requests
wait until compiled, each gets its own matcher, and a grammar that fails in the scheduler (past
the TokenizerManager's early check) ends its request with a 400-type abort."""

from __future__ import annotations

import time

import pytest

from radixlm.constrained.reasoner import ReasonerGrammar
from radixlm.managers.grammar_manager import GrammarManager
from radixlm.managers.schedule_batch import Req
from radixlm.model_loader.model_config import ModelConfig
from radixlm.model_loader.resolve import resolve_model_dir
from radixlm.model_loader.tokenizer import get_tokenizer
from radixlm.sampling.sampling_params import SamplingParams
from radixlm.server_args import ServerArgs


@pytest.fixture(scope="module")
def manager() -> GrammarManager:
    model_dir = resolve_model_dir(None)
    config = ModelConfig(model_dir)
    mgr = GrammarManager(ServerArgs(), get_tokenizer(model_dir), config, set(config.eos_token_ids))
    yield mgr
    mgr.shutdown()


def make_req(rid: str, **params: object) -> Req:
    return Req(rid, [1, 2, 3], SamplingParams(max_new_tokens=8, **params), seed=0)


def poll_until_done(manager: GrammarManager, timeout_s: float = 30.0) -> tuple[list[Req], list[Req]]:
    ready: list[Req] = []
    failed: list[Req] = []
    deadline = time.monotonic() + timeout_s
    while manager.queue and time.monotonic() < deadline:
        r, f = manager.poll(idle=True)
        ready += r
        failed += f
    assert not manager.queue, "grammars still compiling"
    return ready, failed


def test_unconstrained_requests_skip_the_queue(manager: GrammarManager) -> None:
    req = make_req("plain")
    assert not manager.add(req)
    assert req.grammar_key is None and not manager.queue


def test_each_request_gets_its_own_matcher(manager: GrammarManager) -> None:
    reqs = [make_req(f"r{i}", regex="(ab|cd)") for i in range(2)]
    assert all(manager.add(r) for r in reqs)
    ready, failed = poll_until_done(manager)
    assert ready == reqs and not failed
    tokenizer = get_tokenizer(resolve_model_dir(None))
    for token in tokenizer.encode("ab", add_special_tokens=False):
        reqs[0].grammar.accept_token(token)
    assert reqs[0].grammar is not reqs[1].grammar
    with pytest.raises(ValueError):  # r1's matcher is still at the start: "b" alone is not allowed
        reqs[1].grammar.accept_token(tokenizer.encode("b", add_special_tokens=False)[0])


def test_grammar_failing_in_the_scheduler_is_a_400_abort(manager: GrammarManager) -> None:
    req = make_req("bad", regex="(ab")  # the TokenizerManager would have rejected it; the scheduler must too
    assert manager.add(req)
    ready, failed = poll_until_done(manager)
    assert failed == [req] and not ready and req.grammar is None
    reason = req.finished_reason
    assert reason["type"] == "abort" and reason["status_code"] == 400
    assert reason["message"].startswith("invalid regex: Regex parsing error")


def test_abort_takes_a_request_out_of_the_queue(manager: GrammarManager) -> None:
    req = make_req("slow", regex="[a-z]{1,1400}")
    manager.add(req)
    assert manager.take(lambda r: r.rid == "slow") == [req] and not manager.queue


def test_require_reasoning_wraps_the_matcher_or_is_refused(manager: GrammarManager) -> None:
    req = Req("think", [1, 2, 3], SamplingParams(max_new_tokens=8, regex="[0-9]+"), seed=0, require_reasoning=True)
    assert manager.add(req) and req.finished_reason["status_code"] == 400  # this manager has no reasoning parser
    assert "--reasoning-parser" in req.finished_reason["message"] and not manager.queue
    model_dir = resolve_model_dir(None)
    config = ModelConfig(model_dir)
    thinking = GrammarManager(ServerArgs(reasoning_parser="qwen3"), get_tokenizer(model_dir), config,
                              set(config.eos_token_ids))
    try:
        wrapped = Req("think", [1, 2, 3], SamplingParams(max_new_tokens=8, regex="[0-9]+"), seed=0,
                      require_reasoning=True)
        plain = make_req("plain-regex", regex="[0-9]+")
        assert thinking.add(wrapped) and thinking.add(plain)
        ready, failed = poll_until_done(thinking)
        assert ready == [wrapped, plain] and not failed
        assert isinstance(wrapped.grammar, ReasonerGrammar) and not isinstance(plain.grammar, ReasonerGrammar)
        assert wrapped.grammar.think_end_ids == tuple(get_tokenizer(model_dir).encode("</think>",
                                                                                      add_special_tokens=False))
    finally:
        thinking.shutdown()
