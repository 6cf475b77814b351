"""The grammar queue: constrained requests wait here, off the waiting queue, until compiled.

A request with `json_schema` / `regex` / `ebnf` starts its grammar's compilation when it
arrives (on the backend's thread pool, cached by (kind, text)) and joins the waiting queue
only once `poll` hands it a matcher of its own, so unconstrained requests never wait for a
compile. An invalid grammar or a compile timeout ends the request with an abort carrying
`status_code` 400; the TokenizerManager raises it as a ValueError (HTTP 400).

Tensor parallelism: every rank compiles for itself, and compile times differ between
ranks, so with `tp_size > 1` `poll` waits until every queued grammar is done (or timed
out); each rank then moves the same requests in the same order and forms the same batches.

With `--reasoning-parser`, a request with `require_reasoning` gets its matcher wrapped in a ReasonerGrammar:
the constraint starts after the thinking block's end tag.
"""

from __future__ import annotations

import concurrent.futures
import logging
from typing import Any, Callable

from radixlm.constrained import GrammarError, create_grammar_backend, grammar_key
from radixlm.constrained.reasoner import ReasonerGrammar
from radixlm.managers.schedule_batch import Req
from radixlm.reasoning_parser import get_reasoning_format

logger = logging.getLogger(__name__)

IDLE_WAIT_S = 0.01  # nothing else to do: sleep on the compiles instead of spinning


def grammar_abort(message: str) -> dict:
    """The finish reason of a request whose grammar failed: HTTP 400 with `message`."""
    return {"type": "abort", "message": message, "status_code": 400}


class GrammarManager:
    def __init__(self, server_args: Any, tokenizer: Any, model_config: Any, eos_ids: frozenset[int]) -> None:
        self.backend = create_grammar_backend(server_args.grammar_backend, tokenizer, model_config.vocab_size,
                                              stop_token_ids=sorted(eos_ids))
        self.wait_for_all = server_args.tp_size > 1
        self.think_end_ids: list[int] = []
        if server_args.reasoning_parser is not None:
            end_tag = get_reasoning_format(server_args.reasoning_parser).end
            self.think_end_ids = tokenizer.encode(end_tag, add_special_tokens=False)
        self.queue: list[Req] = []

    def add(self, req: Req) -> bool:
        """Queue `req` if it is constrained (True); an invalid key finishes it with a 400 abort."""
        try:
            req.grammar_key = grammar_key(req.sampling_params)
            if req.grammar_key is None:
                return False
            if req.require_reasoning and not self.think_end_ids:
                raise ValueError("require_reasoning needs the server started with --reasoning-parser")
            self.backend.get_future(req.grammar_key)  # starts compiling; never blocks
        except (ValueError, TypeError) as err:
            req.finished_reason = grammar_abort(str(err))
            return True
        self.queue.append(req)
        return True

    def poll(self, idle: bool) -> tuple[list[Req], list[Req]]:
        """(ready, failed): ready requests carry a fresh matcher in `req.grammar`; failed ones a
        400 abort in `finished_reason`. `idle`: nothing else to run, so wait a little."""
        if not self.queue:
            return [], []
        self._wait(idle)
        ready: list[Req] = []
        failed: list[Req] = []
        keep: list[Req] = []
        for req in self.queue:
            result = self.backend.poll_ready(req.grammar_key)
            if result is None:
                keep.append(req)
            elif isinstance(result, GrammarError):
                logger.info("grammar of %s failed: %s", req.rid, result)
                req.finished_reason = grammar_abort(str(result))
                failed.append(req)
            else:
                req.grammar = ReasonerGrammar(result, self.think_end_ids) \
                    if req.require_reasoning and self.think_end_ids else result
                ready.append(req)
        self.queue = keep
        return ready, failed

    def _wait(self, idle: bool) -> None:
        futures = [self.backend.get_future(r.grammar_key) for r in self.queue]
        if self.wait_for_all:
            concurrent.futures.wait(futures, timeout=self.backend.compile_timeout_s)
        elif idle:
            concurrent.futures.wait(futures, timeout=IDLE_WAIT_S, return_when=concurrent.futures.FIRST_COMPLETED)

    def take(self, match: Callable[[Req], bool]) -> list[Req]:
        """Remove and return the queued requests that `match` (aborts)."""
        taken = [r for r in self.queue if match(r)]
        self.queue = [r for r in self.queue if not match(r)]
        return taken

    def reset(self) -> None:
        self.backend.reset()

    def shutdown(self) -> None:
        self.backend.shutdown()
