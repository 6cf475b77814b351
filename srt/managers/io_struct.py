"""Typed messages between the processes, and the native request shape.

`GenerateReqInput` is what `/generate` and `Engine.generate` accept (SGLang's field
names). Everything that crosses a ZMQ socket is a dataclass defined in this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union


@dataclass
class GenerateReqInput:
    text: Optional[Union[str, list[str]]] = None
    input_ids: Optional[Union[list[int], list[list[int]]]] = None
    sampling_params: Optional[Union[dict, list[dict]]] = None
    rid: Optional[Union[str, list[str]]] = None
    return_logprob: Union[bool, list[bool]] = False
    logprob_start_len: Union[int, list[int]] = -1  # -1: only output logprobs
    top_logprobs_num: Union[int, list[int]] = 0
    return_text_in_logprobs: bool = False
    stream: bool = False
    cache_salt: Optional[Union[str, list[str]]] = None
    log_metrics: bool = True
    # the output starts inside a reasoning block: a grammar applies only after the block ends (--reasoning-parser)
    require_reasoning: Union[bool, list[bool]] = False


# ---- TokenizerManager -> Scheduler ------------------------------------------------


@dataclass
class TokenizedGenerateReqInput:
    """One tokenized, validated request (n > 1 is already expanded into n of these)."""

    rid: str
    input_ids: list[int]
    sampling_params: Any  # radixlm.sampling.sampling_params.SamplingParams (normalized)
    stream: bool = False
    return_logprob: bool = False
    logprob_start_len: int = -1
    top_logprobs_num: int = 0
    cache_salt: Optional[str] = None
    require_reasoning: bool = False


@dataclass
class AbortReq:
    rid: str = ""
    abort_all: bool = False


@dataclass
class FlushCacheReq:
    pass


@dataclass
class FlushCacheReqOutput:
    success: bool


@dataclass
class GetServerInfoReq:
    pass


@dataclass
class GetServerInfoReqOutput:
    """Scheduler statistics (merged with the server args by the TokenizerManager)."""

    stats: dict


@dataclass
class HealthCheckReq:
    """Liveness probe: the scheduler answers from its event loop (proves it is not stuck)."""

    token: int = 0


@dataclass
class HealthCheckOutput:
    token: int = 0


# ---- Scheduler -> Detokenizer -> TokenizerManager ----------------------------------


@dataclass
class ReqOutputMeta:
    """Per-request bookkeeping that travels with every output increment."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish_reason: Optional[dict] = None  # None | {"type": "stop"|"length"|"abort", ...}
    retractions: int = 0  # times the scheduler retracted it under memory pressure (issue 4)


@dataclass
class ReqLogprobs:
    """Logprob increments for one request: (logprob, token_id) pairs, top lists of such pairs."""

    input_token_logprobs: list = field(default_factory=list)  # list[tuple[float|None, int]]
    input_top_logprobs: list = field(default_factory=list)  # list[list[tuple[float, int]] | None]
    output_token_logprobs: list = field(default_factory=list)
    output_top_logprobs: list = field(default_factory=list)


@dataclass
class OutputMetas:
    """The `ReqOutputMeta` of every request in a batch message, as columns: a step with hundreds of
    streamed requests builds and pickles five lists, not hundreds of objects. `metas[i]` is row i."""

    prompt_tokens: list[int] = field(default_factory=list)
    completion_tokens: list[int] = field(default_factory=list)
    cached_tokens: list[int] = field(default_factory=list)
    finish_reasons: list[Optional[dict]] = field(default_factory=list)
    retractions: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.prompt_tokens)

    def __getitem__(self, i: int) -> ReqOutputMeta:
        return ReqOutputMeta(prompt_tokens=self.prompt_tokens[i], completion_tokens=self.completion_tokens[i],
                             cached_tokens=self.cached_tokens[i], finish_reason=self.finish_reasons[i],
                             retractions=self.retractions[i])


@dataclass
class DetokenizeParams:
    """How the detokenizer treats one request; sent once, with the request's first output message."""

    skip_special_tokens: bool = True
    no_stop_trim: bool = False
    stop_strs: tuple[str, ...] = ()  # for holding back a possibly partial stop string


@dataclass
class BatchTokenIDOut:
    """One scheduler step's output increments (only requests that have something to send)."""

    rids: list[str]
    new_output_ids: list[list[int]]  # ids generated since the last message for that rid
    metas: OutputMetas
    logprobs: list[Optional[ReqLogprobs]]
    # for the rids whose first message this is (the detokenizer keeps them until the request finishes)
    detokenize_params: dict[str, DetokenizeParams] = field(default_factory=dict)


@dataclass
class BatchStrOut:
    """Detokenized increments: text that became final since the last message for that rid."""

    rids: list[str]
    new_texts: list[str]
    new_output_ids: list[list[int]]
    metas: OutputMetas
    logprobs: list[Optional[ReqLogprobs]]


# ---- Process lifecycle --------------------------------------------------------------


@dataclass
class ProcessReady:
    """Sent by a child over its readiness pipe once it is serving."""

    name: str
    info: dict = field(default_factory=dict)  # e.g. the scheduler's max_total_num_tokens


@dataclass
class ProcessFailed:
    """Sent instead of ProcessReady when startup raised: the child's formatted traceback."""

    name: str
    traceback: str
