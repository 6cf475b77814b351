"""The decode result fast path: a step in which every row only gains its token.

Most decode steps finish nothing, stream nothing and return no logprobs; then processing
the result is one `list.append` per row. `SteadyDecode` proves that for a batch at a
glance: planned once over the rows (O(batch), on a membership change), each step then
checks two batch-wide facts instead of every row: no sampled token is one that can end a
request (`Req.finish_check_tokens`), and every row is at least two tokens short of its
next length check (`Req.finish_check_len`). When either fails, the caller runs the full
per-row loop (`SchedulerOutput`) and plans again at the next step.
"""

from __future__ import annotations

from typing import Optional

from radixlm.managers.schedule_batch import Req


class SteadyDecode:
    def __init__(self, reqs: list[Req], tokens_left: int, stop_tokens: frozenset[int]) -> None:
        self.reqs = reqs
        self.output_lists = [r.output_ids for r in reqs]  # Req.output_ids is never rebound
        self.tokens_left = tokens_left  # fewest tokens any row may still gain before its length check
        self.stop_tokens = stop_tokens  # union of the rows' finish_check_tokens

    @classmethod
    def plan(cls, reqs: list[Req]) -> Optional["SteadyDecode"]:
        """None unless every row is plain: running, not aborting, not streamed, no logprobs, and
        its finish check armed by length and tokens only (no grammar, no stop strings)."""
        stop_tokens: set[int] = set()
        tokens_left = None
        for req in reqs:
            if (req.finished_reason is not None or req.to_abort is not None or req.stream or req.return_logprob
                    or req.finish_check_len <= 0):
                return None
            left = req.finish_check_len - len(req.output_ids)
            tokens_left = left if tokens_left is None else min(tokens_left, left)
            stop_tokens.update(req.finish_check_tokens)
        if tokens_left is None:
            return None
        return cls(reqs, tokens_left, frozenset(stop_tokens))

    def try_append(self, reqs: list[Req], next_ids: list[int]) -> bool:
        """Append every row's token if this step is steady for `reqs`; False (nothing done) otherwise."""
        if self.tokens_left < 2 or reqs != self.reqs:
            return False
        if self.stop_tokens and not self.stop_tokens.isdisjoint(next_ids):
            return False
        for output_ids, token in zip(self.output_lists, next_ids):
            output_ids.append(token)
        self.tokens_left -= 1
        return True
