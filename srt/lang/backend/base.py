"""A backend speaks the native `/generate` request shape; the program logic lives here.

Subclasses only move request dicts (`generate_raw`, `generate_raw_stream`) and find the
chat template. Everything the language needs -- generation, prefix caching, select
scoring from prompt logprobs -- is built here from those requests.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from typing import Any, Iterator, Optional, Union

from radixlm.lang.chat_template import ChatTemplate
from radixlm.lang.choices import (
    UNCONDITIONAL_PREFIX, ChoicesDecision, ChoicesSamplingMethod, token_length_normalized,
)
from radixlm.lang.ir import SglSamplingParams

Response = Union[dict[str, Any], list[dict[str, Any]]]

# Prompt tokens before the end of a prefix that select asks logprobs for, so that a
# choice whose first token merges with the prefix's last one is still scored whole.
_BOUNDARY_MARGIN = 2


class BaseBackend(ABC):
    def __init__(self) -> None:
        self._chat_template: Optional[ChatTemplate] = None
        self._template_lock = threading.Lock()

    # ---- transport (subclasses) ----
    @abstractmethod
    def generate_raw(self, payload: dict[str, Any]) -> Response:
        """Send one native /generate request (non-streaming); return its JSON."""

    @abstractmethod
    def generate_raw_stream(self, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Send one streaming request; yield chunks with cumulative "text"."""

    @abstractmethod
    def load_chat_template(self) -> ChatTemplate: ...

    def flush_cache(self) -> bool:
        return False

    def shutdown(self) -> None:
        pass

    # ---- language operations ----
    def get_chat_template(self) -> ChatTemplate:
        with self._template_lock:
            if self._chat_template is None:
                self._chat_template = self.load_chat_template()
            return self._chat_template

    def cache_prefix(self, text: str) -> dict[str, Any]:
        """Prefill `text` once so that later requests extending it hit the radix cache."""
        out = self.generate_raw({"text": text, "sampling_params": {"max_new_tokens": 0}})
        return out["meta_info"]

    def generate(self, text: str, params: SglSamplingParams, **logprob_args: Any) -> tuple[str, dict[str, Any]]:
        out = self.generate_raw({"text": text, "sampling_params": params.to_srt_kwargs(), **logprob_args})
        return out["text"], out["meta_info"]

    def generate_stream(self, text: str, params: SglSamplingParams,
                        **logprob_args: Any) -> Iterator[tuple[str, Optional[dict[str, Any]]]]:
        """Yield (new text, meta_info of the latest chunk)."""
        payload = {"text": text, "sampling_params": params.to_srt_kwargs(), "stream": True, **logprob_args}
        seen = ""
        for chunk in self.generate_raw_stream(payload):
            full = chunk.get("text", "")
            delta = full[len(seen):] if full.startswith(seen) else full
            seen = full if full.startswith(seen) else seen + full
            yield delta, chunk.get("meta_info")

    def select(self, text: str, choices: list[str],
               choices_method: Optional[ChoicesSamplingMethod] = None) -> ChoicesDecision:
        """Score every choice as a continuation of `text` in one batched request."""
        method = choices_method or token_length_normalized
        prefix_len = self.cache_prefix(text)["prompt_tokens"] if text else 0
        cond, metas = self._choice_logprobs(text, prefix_len, choices)
        uncond = None
        if method.requires_unconditional_logprobs:
            uncond_len = self.cache_prefix(UNCONDITIONAL_PREFIX)["prompt_tokens"]
            uncond, _ = self._choice_logprobs(UNCONDITIONAL_PREFIX, uncond_len, choices)
        decision = method(choices=choices, input_token_logprobs=cond, unconditional_token_logprobs=uncond)
        decision.meta_info.update({
            "choices": list(choices), "input_token_logprobs": cond, "prefix_tokens": prefix_len,
            "cached_tokens": [m.get("cached_tokens") for m in metas], "meta_info": metas,
        })
        if uncond is not None:
            decision.meta_info["unconditional_token_logprobs"] = uncond
        return decision

    def _choice_logprobs(self, prefix: str, prefix_len: int,
                         choices: list[str]) -> tuple[list[list[float]], list[dict[str, Any]]]:
        """Per choice, the logprobs of its own tokens after `prefix` (one batched request).

        The prefix itself rides along as item 0 so its last token ids are known: a
        choice's tokens start where its ids first differ from the prefix's.
        """
        start = max(prefix_len - _BOUNDARY_MARGIN, 0)
        head = [prefix] if prefix else []
        outs = self.generate_raw({
            "text": head + [prefix + c for c in choices], "sampling_params": {"max_new_tokens": 0},
            "return_logprob": True, "logprob_start_len": start,
        })
        prefix_ids = ids_by_position(outs[0]["meta_info"]) if prefix else {}
        metas = [o["meta_info"] for o in outs[len(head):]]
        return [tokens_after_prefix(m, prefix_ids, prefix_len) for m in metas], metas


def _positioned(meta: dict[str, Any]) -> list[tuple[int, Optional[float], int]]:
    """(absolute position, logprob, token id) of each returned input token.

    Positions are counted back from the prompt's end, which holds whatever start the
    server chose for `logprob_start_len`.
    """
    entries = meta.get("input_token_logprobs") or []
    first = meta["prompt_tokens"] - len(entries)
    return [(first + i, e[0], int(e[1])) for i, e in enumerate(entries)]


def ids_by_position(meta: dict[str, Any]) -> dict[int, int]:
    return {pos: tid for pos, _, tid in _positioned(meta)}


def tokens_after_prefix(meta: dict[str, Any], prefix_ids: dict[int, int], prefix_len: int) -> list[float]:
    out: list[float] = []
    diverged = False
    for pos, logprob, tid in _positioned(meta):
        diverged = diverged or pos >= prefix_len or prefix_ids.get(pos) != tid
        if diverged and logprob is not None:
            out.append(float(logprob))
    return out
