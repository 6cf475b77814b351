"""A per-step timeline of the overlap loop (`RADIXLM_STEP_TRACE=FILE`), to find where serving time goes.

One JSON line per batch, written when its results are processed: its kind, batch size and new
tokens; the host time spent building it (`build_ms`), waiting for its results (`wait_ms`) and
processing them (`process_ms`); on CUDA its device time between events recorded around the
forward on its stream (`gpu_ms`) and the device's idle gap before it started (`bubble_ms`: from
the end of the batch processed before it). A bubble is host time the overlap did not hide; it is
negative where the two overlapped (a prefill beside a decode, and the decode processed after it).
`benchmark/step_trace_summary.py` turns a file into a table. Off by default; it costs two events and
one line per step when on.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import IO, Optional

import torch


@dataclass
class GpuSpan:
    """Events around one forward, recorded on the forward thread's stream."""
    start: "torch.cuda.Event" = field(default_factory=lambda: torch.cuda.Event(enable_timing=True))
    end: "torch.cuda.Event" = field(default_factory=lambda: torch.cuda.Event(enable_timing=True))


@dataclass
class StepRecord:
    t: float  # perf_counter when the results were processed
    kind: str
    bs: int
    new_tokens: int
    build_ms: float
    wait_ms: float
    process_ms: float
    gpu_ms: Optional[float] = None
    bubble_ms: Optional[float] = None


class StepTrace:
    def __init__(self, path: str, cuda: bool) -> None:
        self.file: IO[str] = open(path, "a", buffering=1)
        self.cuda = cuda
        self.prev_end: Optional["torch.cuda.Event"] = None

    def span(self) -> Optional[GpuSpan]:
        return GpuSpan() if self.cuda else None

    def record(self, kind: str, bs: int, new_tokens: int, build_s: float, wait_s: float, process_s: float,
               span: Optional[GpuSpan]) -> None:
        rec = StepRecord(time.perf_counter(), kind, bs, new_tokens, 1e3 * build_s, 1e3 * wait_s, 1e3 * process_s)
        if span is not None:
            span.end.synchronize()
            rec.gpu_ms = span.start.elapsed_time(span.end)
            if self.prev_end is not None:
                rec.bubble_ms = self.prev_end.elapsed_time(span.start)
            self.prev_end = span.end
        self.file.write(json.dumps({k: (round(v, 4) if isinstance(v, float) else v)
                                    for k, v in asdict(rec).items()}) + "\n")


def open_step_trace(path: Optional[str], device: torch.device) -> Optional[StepTrace]:
    if not path:
        return None
    try:
        return StepTrace(path, device.type == "cuda")
    except OSError as e:
        raise ValueError(f"RADIXLM_STEP_TRACE={path!r} cannot be opened for appending: {e.strerror}") from None
