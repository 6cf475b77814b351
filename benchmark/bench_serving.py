"""Online serving benchmark: Poisson arrivals against a running server, streamed responses.

    python benchmark/bench_serving.py --backend radixlm --base-url http://127.0.0.1:30000 \
        --dataset-name random --num-prompts 32 --random-input-len 256 --random-output-len 32 \
        --sweep-rates 1,2,4 --output-file results.jsonl --plot results.png

`python -m radixlm.bench_serving ...` runs the same tool from an installed package.

Metric definitions are in `benchmark/serving_metrics.py` and `benchmark/README.md`.
"""

from __future__ import annotations

import sys
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[1]
if not __package__:  # run as a script: siblings are imported as `radixlm.benchmark.*`; do not let
    # benchmark/datasets.py shadow Hugging Face's top-level `datasets` package.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _REPO_ROOT / "benchmark"]

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402

import aiohttp  # noqa: E402
import numpy as np  # noqa: E402
from tqdm import tqdm  # noqa: E402
from transformers import PreTrainedTokenizerBase  # noqa: E402

from radixlm.benchmark.datasets import DatasetConfig, DatasetRow, add_dataset_args, get_dataset, length_bounds  # noqa: E402
from radixlm.benchmark.serving_backends import BACKENDS, TOKEN_ID_BACKENDS, RequestInput  # noqa: E402
from radixlm.benchmark.serving_metrics import RequestOutput, compute_metrics, format_table  # noqa: E402

TOOL_VERSION = "0.1.0"


def arrival_times(rate: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """Send offsets (s) of n requests: a Poisson process of `rate` req/s; inf sends all at 0."""
    if math.isinf(rate):
        return np.zeros(n)
    gaps = rng.exponential(1.0 / rate, size=n)
    gaps[0] = 0.0
    return np.cumsum(gaps)


def parse_rates(text: str) -> list[float]:
    rates = [float(x) for x in text.split(",") if x.strip()]
    if not rates or any(r <= 0 for r in rates):
        raise ValueError(f"request rates must be positive numbers or inf, got {text!r}")
    return rates


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=sorted(BACKENDS), default="radixlm")
    p.add_argument("--base-url", default=None, help="e.g. http://127.0.0.1:30000 (else --host/--port)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--model", default=None, help="model name for OpenAI requests (default: GET /v1/models)")
    p.add_argument("--api-key", default=None, help="sent as `Authorization: Bearer KEY` on every request")
    p.add_argument("--tokenizer", default=None, help="tokenizer path (default: the server's /get_model_info)")
    p.add_argument("--request-rate", type=float, default=math.inf, help="Poisson rate in req/s; inf = all at once")
    p.add_argument("--sweep-rates", default=None, help="comma-separated rates, e.g. 1,2,4,8 (overrides --request-rate)")
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--warmup-requests", type=int, default=1, help="sent before timing, not counted")
    p.add_argument("--flush-cache", action="store_true", help="POST /flush_cache before each rate")
    p.add_argument("--tokenize-prompt", action="store_true", help="send prompts as token ids")
    p.add_argument("--disable-ignore-eos", action="store_true")
    p.add_argument("--extra-request-body", default=None, help="JSON merged into every request body")
    p.add_argument("--output-file", default=None, help="append one JSONL record per rate")
    p.add_argument("--output-details", action="store_true", help="include per-request values in the record")
    p.add_argument("--plot", default=None, help="write latency CDFs (and vs-rate curves) to this PNG")
    p.add_argument("--disable-tqdm", action="store_true")
    add_dataset_args(p)
    args = p.parse_args(argv)
    validate_args(args)
    return args


def validate_args(args: argparse.Namespace) -> None:
    args.base_url = (args.base_url or f"http://{args.host}:{args.port}").rstrip("/")
    args.rates = parse_rates(args.sweep_rates) if args.sweep_rates else [args.request_rate]
    if args.dataset_name == "random":  # fail before loading anything on a bad ratio
        length_bounds(args.random_input_len, args.random_range_ratio, args.range_ratio_style)
    if args.tokenize_prompt and args.backend not in TOKEN_ID_BACKENDS:
        raise ValueError(f"--tokenize-prompt needs a backend in {sorted(TOKEN_ID_BACKENDS)}, not {args.backend!r}")
    if args.max_concurrency is not None and args.max_concurrency < 1:
        raise ValueError("--max-concurrency must be >= 1")


# ---- server and tokenizer ------------------------------------------------------------


async def get_json(session: aiohttp.ClientSession, url: str) -> dict | None:
    try:
        async with session.get(url) as r:
            return await r.json() if r.status == 200 else None
    except (aiohttp.ClientError, json.JSONDecodeError):
        return None


def load_tokenizer(path: str | None) -> PreTrainedTokenizerBase:
    """radixlm's loader when importable (folders, .gguf, the embedded model), else HF's."""
    from transformers import AutoTokenizer

    try:
        from radixlm.model_loader.resolve import default_model_name
        from radixlm.model_loader.tokenizer import get_tokenizer
    except ImportError:
        if path is None:
            raise ValueError("pass --tokenizer (the server did not report a tokenizer_path)") from None
        return AutoTokenizer.from_pretrained(path)
    if path is None or path == default_model_name():  # the server runs the embedded model
        return get_tokenizer(None)
    if Path(path).expanduser().exists():
        return get_tokenizer(path)
    return AutoTokenizer.from_pretrained(path)  # a hub id


async def flush_cache(session: aiohttp.ClientSession, base_url: str) -> None:
    try:
        async with session.post(f"{base_url}/flush_cache") as r:
            if r.status != 200:
                print(f"warning: /flush_cache answered HTTP {r.status}: {await r.text()}", file=sys.stderr)
    except aiohttp.ClientError as e:
        print(f"warning: /flush_cache failed: {e}", file=sys.stderr)


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(_REPO_ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# ---- running -------------------------------------------------------------------------


def make_inputs(rows: list[DatasetRow], args: argparse.Namespace) -> list[RequestInput]:
    extra = json.loads(args.extra_request_body) if args.extra_request_body else {}
    return [
        RequestInput(r.prompt, r.prompt_ids, r.prompt_len, r.output_len, model=args.model or "",
                     send_token_ids=args.tokenize_prompt, ignore_eos=not args.disable_ignore_eos, extra_body=extra)
        for r in rows
    ]


async def warmup(session: aiohttp.ClientSession, args: argparse.Namespace, inputs: list[RequestInput]) -> None:
    """Untimed requests; their prompts are dataset prompts reversed, so they share no prefix
    with a measured request and do not inflate the cache hit rate."""
    send = BACKENDS[args.backend]
    warm = [
        replace(req, prompt=" ".join(req.prompt.split()[::-1]), prompt_ids=req.prompt_ids[::-1],
                output_len=min(16, req.output_len))
        for req in (inputs[i % len(inputs)] for i in range(args.warmup_requests))
    ]
    for out in await asyncio.gather(*(send(session, args.base_url, w) for w in warm)):
        if not out.success:
            raise RuntimeError(f"warm-up request failed: {out.error}")


async def run_rate(session: aiohttp.ClientSession, args: argparse.Namespace, inputs: list[RequestInput],
                   rate: float) -> tuple[list[RequestOutput], float]:
    """Send every input on a Poisson schedule of `rate`; returns outputs (input order) and duration."""
    send = BACKENDS[args.backend]
    limit = asyncio.Semaphore(args.max_concurrency) if args.max_concurrency else None
    bar = None if args.disable_tqdm else _progress_bar(len(inputs), rate)

    async def one(req: RequestInput) -> RequestOutput:
        if limit is None:
            out = await send(session, args.base_url, req)
        else:
            async with limit:
                out = await send(session, args.base_url, req)
        if bar is not None:
            bar.update(1)
        return out

    offsets = arrival_times(rate, len(inputs), np.random.default_rng(args.seed))
    start = time.perf_counter()
    tasks = []
    for req, offset in zip(inputs, offsets):
        delay = start + offset - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(req)))
    outputs = await asyncio.gather(*tasks)
    duration = time.perf_counter() - start
    if bar is not None:
        bar.close()
    return list(outputs), duration


def _progress_bar(total: int, rate: float) -> tqdm:

    return tqdm(total=total, desc=f"rate={rate:g}", file=sys.stderr)


# ---- reporting -----------------------------------------------------------------------


def dataset_summary(rows: list[DatasetRow], config: DatasetConfig) -> dict:
    summary = {
        "name": config.dataset_name, "num_requests": len(rows),
        "mean_input_len": float(np.mean([r.prompt_len for r in rows])),
        "mean_output_len": float(np.mean([r.output_len for r in rows])),
    }
    if config.dataset_name == "random":
        summary["range_ratio_style"] = config.range_ratio_style
        summary["input_len_bounds"] = length_bounds(config.random_input_len, config.random_range_ratio, config.range_ratio_style)
        summary["output_len_bounds"] = length_bounds(config.random_output_len, config.random_range_ratio, config.range_ratio_style)
    return summary


def print_header(args: argparse.Namespace, summary: dict, commit: str | None, server_info: dict | None) -> None:
    print(f"radixlm bench_serving {TOOL_VERSION} (commit {commit}) on {platform.node()} ({platform.machine()})")
    if server_info:
        keys = ("device", "tp_size", "attention_backend", "dtype", "max_total_num_tokens", "chunked_prefill_size")
        print("server: " + " ".join(f"{k}={server_info[k]}" for k in keys if k in server_info))
    print(f"backend={args.backend} base_url={args.base_url} model={args.model} tokenizer={args.tokenizer}")
    print(f"rates={args.rates} max_concurrency={args.max_concurrency} warmup={args.warmup_requests} "
          f"seed={args.seed} tokenize_prompt={args.tokenize_prompt} ignore_eos={not args.disable_ignore_eos}")
    line = f"dataset={summary['name']} requests={summary['num_requests']}"
    if "range_ratio_style" in summary:
        line += (f" range_ratio={args.random_range_ratio} style={summary['range_ratio_style']}"
                 f" input_len~U{list(summary['input_len_bounds'])} output_len~U{list(summary['output_len_bounds'])}")
    print(line)
    print(f"realised mean input_len={summary['mean_input_len']:.1f} output_len={summary['mean_output_len']:.1f}")


def build_record(args: argparse.Namespace, summary: dict, metrics: dict, outputs: list[RequestOutput],
                 server_info: dict | None, commit: str | None) -> dict:
    settings = {k: v for k, v in vars(args).items() if k not in ("rates", "api_key")}
    record = {
        "tool": "radixlm.bench_serving", "version": TOOL_VERSION, "commit": commit,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "settings": settings, "dataset": summary,
        "server_info": server_info, **metrics,
    }
    if args.output_details:
        record["details"] = {
            "prompt_lens": [o.prompt_len for o in outputs], "output_lens": [o.output_len for o in outputs],
            "cached_tokens": [o.cached_tokens for o in outputs], "ttfts": [o.ttft for o in outputs],
            "latencies": [o.latency for o in outputs], "errors": [o.error for o in outputs],
        }
    return record


def json_safe(value: object) -> object:
    """Strict JSON: NaN (no samples) -> null, +-inf (e.g. rate inf) -> "inf"/"-inf", tuples -> lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def append_jsonl(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(json_safe(record), default=str, allow_nan=False) + "\n")


# ---- main ----------------------------------------------------------------------------


async def benchmark(args: argparse.Namespace) -> list[dict]:
    timeout = aiohttp.ClientTimeout(total=6 * 3600)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else None
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector, headers=headers) as session:
        model_info = await get_json(session, f"{args.base_url}/get_model_info") or {}
        if args.model is None:
            models = await get_json(session, f"{args.base_url}/v1/models") or {}
            args.model = (models.get("data") or [{}])[0].get("id") or model_info.get("model_path") or "default"
        if args.tokenizer is None:
            args.tokenizer = model_info.get("tokenizer_path")
        config = DatasetConfig.from_cli_args(args)
        rows = get_dataset(config, load_tokenizer(args.tokenizer))
        summary, commit = dataset_summary(rows, config), git_commit()
        print_header(args, summary, commit, await get_json(session, f"{args.base_url}/get_server_info"))
        inputs = make_inputs(rows, args)
        records, runs = [], []
        for rate in args.rates:
            if args.flush_cache:
                await flush_cache(session, args.base_url)
            if args.warmup_requests:
                await warmup(session, args, inputs)
            outputs, duration = await run_rate(session, args, inputs, rate)
            metrics = {"request_rate": rate, **compute_metrics(outputs, duration)}
            server_info = await get_json(session, f"{args.base_url}/get_server_info")
            record = build_record(args, summary, metrics, outputs, server_info, commit)
            records.append(record)
            runs.append((f"rate={rate:g}", metrics, outputs))
            if args.output_file:
                append_jsonl(args.output_file, record)
        print(format_table([(label, m) for label, m, _ in runs]))
        for label, m, _ in runs:
            for error in m["errors"]:
                print(f"{label} error: {error}")
        if args.plot:
            from radixlm.benchmark.serving_plot import plot_runs

            plot_runs(args.plot, runs, f"{args.backend} {args.model} {summary['name']}")
        return records


def main(argv: list[str] | None = None) -> list[dict]:
    try:
        args = parse_args(argv)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None
    return asyncio.run(benchmark(args))


if __name__ == "__main__":
    main()
