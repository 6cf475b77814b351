"""DetokenizerManager: its own process; turns token-id increments into text increments.

Incremental detokenization keeps two offsets per request (SGLang's `surr_offset` and
`read_offset`): it decodes `ids[surr:]` and `ids[surr:read]` and emits the difference,
holding everything back while the text ends in U+FFFD (half a UTF-8 character). A
suffix that could still grow into a stop string is held back too, so a stop string
is never streamed; at the finish the stop string is trimmed unless `no_stop_trim`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Optional

from radixlm.managers import hop_trace
from radixlm.managers.io_struct import BatchStrOut, BatchTokenIDOut, DetokenizeParams

logger = logging.getLogger(__name__)

_REPLACEMENT_CHAR = "\ufffd"
# Window of already-decoded tokens kept as context, so merges and leading spaces decode right.
_SURR_WINDOW = 5


@dataclass
class DecodeState:
    skip_special_tokens: bool
    no_stop_trim: bool
    stop_strs: tuple[str, ...]
    ids: list[int] = field(default_factory=list)
    surr_offset: int = 0
    read_offset: int = 0
    text: str = ""  # decoded so far (final up to read_offset)
    sent_len: int = 0  # characters of `text` already sent


class IncrementalDetokenizer:
    """Pure per-request state machine; unit-testable without processes."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.states: dict[str, DecodeState] = {}

    def _decode(self, ids: list[int], skip: bool) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=skip)

    def step(self, rid: str, new_ids: list[int], finish_reason: Optional[dict], skip_special_tokens: bool = True,
             no_stop_trim: bool = False, stop_strs: tuple[str, ...] = ()) -> str:
        """Feed new ids; return the text that became final (and safe to send) with them."""
        state = self.states.get(rid)
        if state is None:
            state = self.states[rid] = DecodeState(skip_special_tokens, no_stop_trim, tuple(stop_strs))
        state.ids.extend(new_ids)
        if finish_reason is not None:
            self.states.pop(rid, None)
            return self._finish(state, finish_reason)
        self._advance(state)
        emit_upto = len(state.text) - _stop_prefix_holdback(state.text, state.stop_strs)
        out = state.text[state.sent_len:emit_upto]
        state.sent_len = max(state.sent_len, emit_upto)
        return out

    def _advance(self, state: DecodeState) -> None:
        if len(state.ids) <= state.read_offset:
            return
        surr = self._decode(state.ids[state.surr_offset:state.read_offset], state.skip_special_tokens)
        full = self._decode(state.ids[state.surr_offset:], state.skip_special_tokens)
        if len(full) > len(surr) and not full.endswith(_REPLACEMENT_CHAR):
            state.text += full[len(surr):]
            state.read_offset = len(state.ids)
            state.surr_offset = max(state.surr_offset, state.read_offset - _SURR_WINDOW)

    def _finish(self, state: DecodeState, finish_reason: dict) -> str:
        ids = state.ids
        matched = finish_reason.get("matched")
        trim = not state.no_stop_trim and finish_reason.get("type") == "stop"
        if trim and isinstance(matched, int) and ids and ids[-1] == matched:
            ids = ids[:-1]
        tail = ids[state.surr_offset:]
        surr = self._decode(ids[state.surr_offset:min(state.read_offset, len(ids))], state.skip_special_tokens)
        full = self._decode(tail, state.skip_special_tokens)
        text = state.text + full[len(surr):] if full.startswith(surr) else self._decode(ids, state.skip_special_tokens)
        if trim and isinstance(matched, str) and matched:
            pos = text.find(matched, max(0, state.sent_len - len(matched)))
            if pos < 0:
                pos = text.find(matched)
            if pos >= 0:
                text = text[:pos]
        return text[state.sent_len:]

    def discard(self, rid: str) -> None:
        self.states.pop(rid, None)


def _stop_prefix_holdback(text: str, stop_strs: tuple[str, ...]) -> int:
    """Length of the longest suffix of text that is a proper prefix of a stop string."""
    best = 0
    for stop in stop_strs:
        for k in range(min(len(stop) - 1, len(text)), best, -1):
            if text.endswith(stop[:k]):
                best = k
                break
    return best


class DetokenizerManager:
    def __init__(self, server_args: Any, port_args: Any) -> None:
        import zmq

        from radixlm.model_loader.tokenizer import get_tokenizer

        self.tokenizer = get_tokenizer(server_args.tokenizer_path or server_args.model_path,
                                       trust_remote_code=server_args.trust_remote_code)
        self.detok = IncrementalDetokenizer(self.tokenizer)
        self.context = zmq.Context(2)
        self.recv_from_scheduler = self.context.socket(zmq.PULL)
        self.recv_from_scheduler.bind(port_args.detokenizer_ipc)
        self.send_to_tokenizer = self.context.socket(zmq.PUSH)
        self.send_to_tokenizer.connect(port_args.tokenizer_ipc)

    def ready_info(self) -> dict:
        return {}

    def handle(self, out: BatchTokenIDOut) -> BatchStrOut:
        texts = []
        default = DetokenizeParams()
        for rid, new_ids, finish_reason in zip(out.rids, out.new_output_ids, out.metas.finish_reasons):
            params = out.detokenize_params.get(rid, default)  # only in a request's first message
            texts.append(self.detok.step(rid, new_ids, finish_reason, params.skip_special_tokens,
                                         params.no_stop_trim, params.stop_strs))
        return BatchStrOut(rids=out.rids, new_texts=texts, new_output_ids=out.new_output_ids, metas=out.metas,
                           logprobs=out.logprobs)

    def event_loop(self) -> None:
        while True:
            msg = self.recv_from_scheduler.recv_pyobj()
            hop_trace.mark("detok_recv")
            if isinstance(msg, BatchTokenIDOut):
                out = self.handle(msg)
                hop_trace.mark("detok_sent")  # before the send (hop_trace docstring)
                self.send_to_tokenizer.send_pyobj(out)
            else:
                logger.warning("detokenizer: unexpected message %s", type(msg).__name__)


def run_detokenizer_process(server_args: Any, port_args: Any, ready_pipe: Any, parent_pid: int) -> None:
    from radixlm.managers.child_process import run_child

    run_child("detokenizer", lambda: DetokenizerManager(server_args, port_args), ready_pipe, parent_pid,
              server_args.log_level)
