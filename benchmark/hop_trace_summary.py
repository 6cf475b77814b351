"""Summarise a hop trace (RADIXLM_HOP_TRACE=FILE on the server; see srt/managers/hop_trace.py).

    python benchmark/hop_trace_summary.py FILE [--skip N]

Meant for requests sent one at a time (a TTFT probe: `gpu_session.sh ttft_trace`): from each
`http_in`, every later hop is the first of its name after the hop before it, in the order a first
token passes them. Prints the median and p90 gap into each hop over the requests that passed all of
them, and the host time outside the forward (`http_in` -> `launched` plus `result` -> `http_out`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "srt" / "managers"))
from hop_trace import HOPS  # noqa: E402 - the module alone (no package import: a device-free summary)


def load(path: str) -> list[tuple[float, str]]:
    rows = []
    with open(path) as f:
        for line in f:
            t, _pid, hop = line.split()
            rows.append((float(t), hop))
    return sorted(rows)


def requests(rows: list[tuple[float, str]]) -> list[list[float]]:
    """Per `http_in`, the times of HOPS in order (requests that miss a hop are left out)."""
    out = []
    for i, (t0, hop) in enumerate(rows):
        if hop != HOPS[0]:
            continue
        times, want, at = [t0], 1, t0
        for t, h in rows[i + 1:]:
            if want == len(HOPS):
                break
            if h == HOPS[0]:
                break  # the next request arrived first: not a one-at-a-time request
            if h == HOPS[want] and t >= at:
                times.append(t)
                at, want = t, want + 1
        if want == len(HOPS):
            out.append(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("file")
    parser.add_argument("--skip", type=int, default=2, help="leading requests left out (warm-up)")
    args = parser.parse_args()
    reqs = requests(load(args.file))[args.skip:]
    if not reqs:
        print("no request passed every hop")
        return
    print(f"{len(reqs)} requests; ms into each hop from the one before (median / p90)")
    print("| hop | median | p90 |")
    print("|---|---|---|")

    def row(name: str, gaps: list[float]) -> None:
        gaps = sorted(gaps)
        print(f"| {name} | {statistics.median(gaps):.3f} | {gaps[int(0.9 * (len(gaps) - 1))]:.3f} |")

    for k in range(1, len(HOPS)):
        row(f"{HOPS[k - 1]} -> {HOPS[k]}", [1e3 * (r[k] - r[k - 1]) for r in reqs])
    launched, result = HOPS.index("launched"), HOPS.index("result")
    row("outside the forward (http_in -> launched, result -> http_out)",
        [1e3 * (r[launched] - r[0] + r[-1] - r[result]) for r in reqs])
    row("http_in -> http_out", [1e3 * (r[-1] - r[0]) for r in reqs])


if __name__ == "__main__":
    main()
