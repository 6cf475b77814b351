"""`python -m radixlm.bench_serving`: the online serving benchmark, as SGLang users run it.

The tool itself is `benchmark/bench_serving.py` (installed as `radixlm.benchmark.bench_serving`);
this module only gives it the package-level name. Flags, metrics and output are the same.
"""

from __future__ import annotations

from radixlm.benchmark.bench_serving import main

if __name__ == "__main__":
    main()
