"""Benchmarks (run as scripts: `python benchmark/bench_serving.py ...`)."""
