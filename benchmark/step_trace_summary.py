"""Summarise a step trace (RADIXLM_STEP_TRACE=FILE on the server or Engine; see srt/managers/step_trace.py).

    python benchmark/step_trace_summary.py FILE [--skip N]

Prints one row per batch kind (decode rows also by batch-size band): steps, mean new tokens, and the
mean and median of wall time per step (between consecutive results), device time, the device's idle
gap before the batch, host build, wait and processing time; and the sums, in seconds, of wall, device and
bubble time (where the run's time went). `decode after extend` is the first decode following a prefill:
the step that pays for folding the new request in.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict

FIELDS = ("wall_ms", "gpu_ms", "bubble_ms", "build_ms", "wait_ms", "process_ms")
BANDS = ((1, 1), (2, 4), (5, 8), (9, 16), (17, 64), (65, 256))


def load(path: str, skip: int) -> list[dict]:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for prev, row in zip(rows, rows[1:]):
        row["wall_ms"] = 1e3 * (row["t"] - prev["t"])
    return rows[max(skip, 1):]


def band(bs: int) -> str:
    for lo, hi in BANDS:
        if lo <= bs <= hi:
            return f"bs {lo}" if lo == hi else f"bs {lo}-{hi}"
    return f"bs {BANDS[-1][1] + 1}+"


def group(rows: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = defaultdict(list)
    prev_kind = None
    for row in rows:
        kind = row["kind"]
        groups[kind].append(row)
        if kind == "decode":
            groups[f"decode {band(row['bs'])}"].append(row)
            if prev_kind in ("extend", "mixed"):
                groups["decode after extend"].append(row)
        prev_kind = kind
    return groups


def stat(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    return f"{statistics.fmean(values):.2f} / {statistics.median(values):.2f}"


def total(rows: list[dict]) -> str:
    """Sums of wall, device and bubble time in seconds ("-" where a field was not recorded)."""
    sums = []
    for f in ("wall_ms", "gpu_ms", "bubble_ms"):
        values = [r[f] for r in rows if r.get(f) is not None]
        sums.append(f"{sum(values) / 1e3:.2f}" if values else "-")
    return " / ".join(sums)


def table(groups: dict[str, list[dict]]) -> str:
    head = "| batches | steps | mean bs | mean new tokens | " + " | ".join(f"{f[:-3]} ms (mean / median)"
                                                                    for f in FIELDS) + " | wall / device / bubble s |"
    lines = [head, "|" + "---|" * (5 + len(FIELDS))]
    for name in sorted(groups, key=lambda n: (not n.startswith("extend"), n)):
        rows = groups[name]
        cells = [name, str(len(rows)), f"{statistics.fmean(r['bs'] for r in rows):.1f}",
                 f"{statistics.fmean(r['new_tokens'] for r in rows):.0f}"]
        cells += [stat([r.get(f) for r in rows]) for f in FIELDS]
        cells.append(total(rows))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--skip", type=int, default=0, help="leading records to ignore (warm-up)")
    args = ap.parse_args()
    print(table(group(load(args.path, args.skip))))


if __name__ == "__main__":
    main()
