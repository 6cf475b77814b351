"""Per-request state held by the TokenizerManager while a request is in flight."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from radixlm.managers.io_struct import ReqLogprobs, ReqOutputMeta, TokenizedGenerateReqInput


class ReqState:
    def __init__(self, req: TokenizedGenerateReqInput, event: asyncio.Event, logprob_tokenizer: Any = None) -> None:
        self.req = req
        self.event = event  # shared by the states of one batch
        self.tokenizer = logprob_tokenizer  # set when token texts are wanted in logprobs
        self.text = ""
        self.output_ids: list[int] = []
        self.meta: Optional[ReqOutputMeta] = None
        self.logprobs = ReqLogprobs() if req.return_logprob else None
        self.outputs: list[dict] = []
        self.finished = False
        self.error: Optional[BaseException] = None
        self.created = time.perf_counter()
        self.first_token_at: Optional[float] = None
        self.last_token_at: Optional[float] = None
        self.last_completion_tokens = 0

    def add_increment(self, text: str, new_ids: list[int], meta: ReqOutputMeta, logprobs: Optional[ReqLogprobs]) -> None:
        self.text += text
        self.output_ids.extend(new_ids)
        self.meta = meta
        if self.logprobs is not None and logprobs is not None:
            for name in ("input_token_logprobs", "input_top_logprobs", "output_token_logprobs", "output_top_logprobs"):
                getattr(self.logprobs, name).extend(getattr(logprobs, name))
        self.finished = meta.finish_reason is not None
        self.outputs.append(self.to_dict())
        self.event.set()

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.event.set()

    def take_outputs(self, stream: bool) -> list[dict]:
        """Stream: every update since the last call. Otherwise: only the final output, once."""
        outs, self.outputs = self.outputs, []
        if stream:
            return outs
        return outs[-1:] if self.finished else []

    def _entry(self, logprob: Optional[float], token_id: int) -> tuple:
        text = self.tokenizer.decode([token_id]) if self.tokenizer is not None else None
        return (logprob, token_id, text)

    def _top(self, tops: list) -> list:
        return [None if t is None else [self._entry(lp, tid) for lp, tid in t] for t in tops]

    def to_dict(self) -> dict:
        meta = self.meta
        info: dict[str, Any] = {
            "id": self.req.rid, "prompt_tokens": meta.prompt_tokens, "completion_tokens": meta.completion_tokens,
            "cached_tokens": meta.cached_tokens, "retractions": meta.retractions, "finish_reason": meta.finish_reason,
            "e2e_latency": time.perf_counter() - self.created,
        }
        if self.logprobs is not None:
            lp = self.logprobs
            info["input_token_logprobs"] = [self._entry(v, t) for v, t in lp.input_token_logprobs]
            info["output_token_logprobs"] = [self._entry(v, t) for v, t in lp.output_token_logprobs]
            info["input_top_logprobs"] = self._top(lp.input_top_logprobs)
            info["output_top_logprobs"] = self._top(lp.output_top_logprobs)
        return {"text": self.text, "output_ids": list(self.output_ids), "meta_info": info}

    def observe_metrics(self, collector: Any, meta: ReqOutputMeta) -> None:
        now = time.perf_counter()
        new_tokens = meta.completion_tokens - self.last_completion_tokens
        if new_tokens > 0:
            if self.first_token_at is None:
                self.first_token_at = now
                collector.observe_time_to_first_token(now - self.created)
            elif self.last_token_at is not None:
                collector.observe_inter_token_latency(now - self.last_token_at, num_tokens=new_tokens)
            collector.inc_generation_tokens(new_tokens)
            self.last_token_at = now
            self.last_completion_tokens = meta.completion_tokens
        if meta.finish_reason is not None:
            collector.observe_e2e_request_latency(now - self.created)
            collector.inc_prompt_tokens(meta.prompt_tokens)
            collector.inc_cached_tokens(meta.cached_tokens)
            collector.inc_requests(meta.finish_reason.get("type", "unknown"))
