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
