"""Drive a running radixlm server with the official `openai` client at several concurrencies.

    radixlm-server --port 30000 &
    python benchmark/bench_openai_client.py --base-url http://127.0.0.1:30000 --concurrency 1 8 32

Each request is a streamed chat completion with `ignore_eos` (fixed output length) and
`stream_options.include_usage`. Per concurrency level it reports time to first token
(first content chunk), inter-token latency (gaps between content chunks), end-to-end
latency and output-token / request throughput, as a Markdown table with its settings.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import os
import platform
import statistics
import time
from typing import Optional

import openai

from radixlm.provenance import git_commit

TOPICS = ("rivers", "mountains", "bread", "trains", "owls", "glass", "chess", "tides", "copper", "maps",
          "violins", "deserts", "bees", "clocks", "lanterns", "comets")


@dataclasses.dataclass
class RequestResult:
    ttft_s: float
    itls_s: list[float]
    e2e_s: float
    output_tokens: int


@dataclasses.dataclass
class LevelResult:
    concurrency: int
    requests: list[RequestResult]
    wall_s: float

    def row(self) -> list[str]:
        ttft = [r.ttft_s * 1e3 for r in self.requests]
        itl = [x * 1e3 for r in self.requests for x in r.itls_s]
        e2e = [r.e2e_s for r in self.requests]
        tokens = sum(r.output_tokens for r in self.requests)
        return [str(self.concurrency), str(len(self.requests)), _f(statistics.mean(ttft)), _f(_pct(ttft, 50)),
                _f(_pct(ttft, 99)), _f(statistics.mean(itl) if itl else 0.0), _f(_pct(itl, 50)), _f(_pct(itl, 99)),
                _f(statistics.mean(e2e), 2), _f(tokens / self.wall_s, 1), _f(len(self.requests) / self.wall_s, 3)]


HEADER = ["concurrency", "requests", "TTFT mean ms", "TTFT p50 ms", "TTFT p99 ms", "ITL mean ms", "ITL p50 ms",
          "ITL p99 ms", "E2E mean s", "output tok/s", "req/s"]


def _f(x: float, digits: int = 0) -> str:
    return f"{x:.{digits}f}"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def make_messages(i: int, prompt_words: int) -> list[dict]:
    topic = TOPICS[i % len(TOPICS)]
    filler = " ".join(f"{topic}-{k}" for k in range(max(0, prompt_words - 12)))
    return [{"role": "user", "content": f"Request {i}: write a short paragraph about {topic}. {filler}"}]


async def one_request(client: openai.AsyncOpenAI, model: str, i: int, args: argparse.Namespace) -> RequestResult:
    start = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model, messages=make_messages(i, args.prompt_words), max_tokens=args.max_tokens, temperature=0.0,
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    first: Optional[float] = None
    last = start
    itls: list[float] = []
    tokens = 0
    async for chunk in stream:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if not chunk.choices or not chunk.choices[0].delta.content:
            continue
        now = time.perf_counter()
        if first is None:
            first = now
        else:
            itls.append(now - last)
        last = now
    end = time.perf_counter()
    return RequestResult(ttft_s=(first or end) - start, itls_s=itls, e2e_s=end - start, output_tokens=tokens)


async def run_level(client: openai.AsyncOpenAI, model: str, concurrency: int, num_requests: int,
                    args: argparse.Namespace) -> LevelResult:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(num_requests):
        queue.put_nowait(i)
    results: list[RequestResult] = []

    async def worker() -> None:
        while not queue.empty():
            results.append(await one_request(client, model, queue.get_nowait(), args))

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return LevelResult(concurrency, results, time.perf_counter() - start)


def render(levels: list[LevelResult], model: str, args: argparse.Namespace) -> str:
    lines = [
        f"### bench_openai_client ({datetime.date.today().isoformat()})",
        "",
        f"- model: `{model}`; server: {args.base_url}; streamed chat, temperature 0, ignore_eos",
        f"- prompt ~{args.prompt_words} words; max_tokens {args.max_tokens}; requests per level "
        f"max({args.min_requests}, {args.requests_per_slot} x concurrency)",
        f"- client host: {platform.platform()}, {os.cpu_count()} CPUs; commit {git_commit(__file__)}",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|" + "|".join("---:" for _ in HEADER) + "|",
    ]
    lines += ["| " + " | ".join(level.row()) + " |" for level in levels]
    return "\n".join(lines) + "\n"


async def main_async(args: argparse.Namespace) -> str:
    client = openai.AsyncOpenAI(base_url=args.base_url.rstrip("/") + "/v1", api_key=args.api_key or "none",
                                max_retries=0, timeout=args.timeout)
    model = args.model or (await client.models.list()).data[0].id
    await one_request(client, model, 0, args)  # warm-up, not measured
    levels = []
    for concurrency in args.concurrency:
        num = max(args.min_requests, args.requests_per_slot * concurrency)
        levels.append(await run_level(client, model, concurrency, num, args))
        print(f"concurrency {concurrency}: done ({num} requests)", flush=True)
    await client.close()
    return render(levels, model, args)


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", default="http://127.0.0.1:30000")
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--model", default=None, help="default: the first id of /v1/models")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests-per-slot", type=int, default=2, help="requests per level = this x concurrency")
    parser.add_argument("--min-requests", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--prompt-words", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--output", default=None, help="also append the table to this Markdown file")
    return parser.parse_args(argv)


def main(argv: Optional[list[str]] = None) -> None:
    args = parse_args(argv)
    table = asyncio.run(main_async(args))
    print(table)
    if args.output:
        with open(args.output, "a", encoding="utf-8") as f:
            f.write("\n" + table)


if __name__ == "__main__":
    main()
