"""`--plot FILE.png`: latency CDFs per run and, for sweeps, throughput and latency vs rate."""

from __future__ import annotations

import numpy as np

from radixlm.benchmark.serving_metrics import RequestOutput, itl_per_chunk, itl_per_token

CDF_PANELS = ["TTFT", "ITL per token", "ITL per chunk", "E2E latency"]


def latency_samples(outputs: list[RequestOutput]) -> dict[str, list[float]]:
    """Per-panel latency samples in ms over the successful requests."""
    done = [o for o in outputs if o.success]
    return {
        "TTFT": [o.ttft * 1e3 for o in done],
        "ITL per token": [s * 1e3 for o in done for s in itl_per_token(o.chunk_times, o.chunk_tokens)],
        "ITL per chunk": [s * 1e3 for o in done for s in itl_per_chunk(o.chunk_times, o.chunk_tokens)],
        "E2E latency": [o.latency * 1e3 for o in done],
    }


def plot_runs(path: str, runs: list[tuple[str, dict, list[RequestOutput]]], title: str) -> None:
    """runs: (label, metrics, outputs) per request rate; one figure written to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sweep = len(runs) > 1
    nrows = 2 if sweep else 1
    fig, axes = plt.subplots(nrows, 4, figsize=(20, 4.5 * nrows), squeeze=False)
    for label, _, outputs in runs:
        for ax, (panel, samples) in zip(axes[0], latency_samples(outputs).items()):
            if samples:
                xs = np.sort(samples)
                ax.plot(xs, np.arange(1, len(xs) + 1) / len(xs), label=label)
            ax.set(title=f"{panel} CDF", xlabel="ms", ylabel="fraction of samples")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    if sweep:
        _plot_vs_rate(axes[1], runs)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _plot_vs_rate(axes: np.ndarray, runs: list[tuple[str, dict, list[RequestOutput]]]) -> None:
    rates = [m["request_rate"] for _, m, _ in runs]
    xs = np.arange(len(rates))
    panels = [
        ("Output throughput (tok/s)", lambda m: [m["output_throughput"]]),
        ("TTFT median / p99 (ms)", lambda m: [m["ttft_ms"]["median"], m["ttft_ms"]["p99"]]),
        ("ITL per token median / p99 (ms)", lambda m: [m["itl_per_token_ms"]["median"], m["itl_per_token_ms"]["p99"]]),
        ("E2E median / p99 (ms)", lambda m: [m["e2e_latency_ms"]["median"], m["e2e_latency_ms"]["p99"]]),
    ]
    for ax, (title, values) in zip(axes, panels):
        series = np.array([values(m) for _, m, _ in runs])
        for j, name in enumerate(["median", "p99"] if series.shape[1] > 1 else ["tok/s"]):
            ax.plot(xs, series[:, j], marker="o", label=name)
        ax.set_xticks(xs, [str(r) for r in rates])
        ax.set(title=f"{title} vs request rate", xlabel="request rate (req/s)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
