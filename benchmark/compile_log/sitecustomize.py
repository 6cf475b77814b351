"""Log every Triton JIT compile of every Python process started with this folder on PYTHONPATH.

    PYTHONPATH=benchmark/compile_log:$PYTHONPATH RADIXLM_COMPILE_LOG=/tmp/compiles.log python3 ...

One line per kernel variant a process builds or loads from the disk cache: the wall-clock time it began,
the process id, the kernel, the seconds it took (about 1 s for a real compile, a few ms for a disk-cache
hit) and its specialization key. `gpu_session.sh shared_prefix_fresh` uses it to find compiles inside a
benchmark's timed run. Does nothing when RADIXLM_COMPILE_LOG is unset or Triton has no `_do_compile`.
"""

import os
import time

_LOG = os.environ.get("RADIXLM_COMPILE_LOG")


def _install(path: str) -> None:
    import triton.runtime.jit as jit

    compile_variant = getattr(jit.JITFunction, "_do_compile", None)
    if compile_variant is None:
        return

    def logged(self, key, *args, **kwargs):
        start = time.time()
        try:
            return compile_variant(self, key, *args, **kwargs)
        finally:
            with open(path, "a") as f:
                f.write(f"{start:.3f} {os.getpid()} {getattr(self, '__name__', '?')} {time.time() - start:.3f} {key}\n")

    jit.JITFunction._do_compile = logged


if _LOG:
    try:
        _install(_LOG)
    except ImportError:  # no Triton in this interpreter
        pass
