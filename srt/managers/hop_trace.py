"""Where a request's host time goes between processes (`RADIXLM_HOP_TRACE=FILE`), to find what a
time-to-first-token spends outside the forward.

Each process appends `perf_counter pid hop` lines to FILE as a message passes one of the hops
below (perf_counter is the system's monotonic clock, so the processes' lines compare). Off by
default: `mark` is then one global test. `benchmark/hop_trace_summary.py` pairs the hops of
requests sent one at a time (a TTFT probe) and prints the median gap between consecutive hops.
The HTTP hops are marked on the native `/generate` route (bench_serving's `radixlm` backend), the
launch and result hops by the overlap loop (the default scheduler loop). A `*_sent` hop is marked just
before its send: marked after, it could follow the receiver's hop, and the summary would drop the request.
"""

from __future__ import annotations

import os
import time
from typing import IO, Optional

from radixlm import environ

# in the order a request's first token passes them
HOPS = ("http_in", "tm_sent", "sched_recv", "launched", "result", "sched_sent", "detok_recv", "detok_sent",
        "tm_recv", "tm_loop", "http_out")

_path = environ.hop_trace_path()
_file: Optional[IO[str]] = None


def mark(hop: str) -> None:
    """Record that a message passed `hop` (one of HOPS) now; a no-op unless RADIXLM_HOP_TRACE is set."""
    if _path is None:
        return
    global _file
    if _file is None:
        _file = open(_path, "a", buffering=1)
    _file.write(f"{time.perf_counter():.6f} {os.getpid()} {hop}\n")
