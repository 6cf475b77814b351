"""How the serving children (scheduler ranks, detokenizer) start: `spawn` or `forkserver`.

Every child imports torch, transformers and xgrammar: 4-6 s each on a 2-core machine, paid again by
every child of every start under `spawn`. Under `forkserver` one server process imports them once (the
PRELOAD below) and each child is forked from it with those modules loaded; a process that starts many
engines (a test session, a notebook) pays the imports once in all.

A forked child inherits the forkserver's environment, frozen when the forkserver started, not the
parent's at the child's start (multiprocessing itself sends the parent's current directory and import
path). So every child runs `child_entry` first: it takes the parent's current environment, and only then
imports the serving module it runs and unpickles its arguments (sent as bytes for that reason). The
preload is third-party modules only, so radixlm's import-time settings (`hop_trace`, the kernel tables)
follow the parent's environment; the preloaded modules' own (OMP_NUM_THREADS, TRITON_INTERPRET) are those
of the process's first start.

The method: `RADIXLM_MP_START_METHOD`, default forkserver on the CPU under Linux, else spawn. Not on CUDA:
a preloaded module queries CUDA at import, and torch then refuses CUDA in the forked children (an H100 run
failed so: "Cannot re-initialize CUDA in forked subprocess").
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import pickle
from typing import Any

# imported once by the forkserver; a name that fails to import is skipped by multiprocessing
PRELOAD = ["numpy", "zmq", "torch", "safetensors.torch", "transformers", "transformers.models.llama",
           "transformers.models.llama.configuration_llama", "transformers.models.qwen2.configuration_qwen2",
           "transformers.models.qwen3.configuration_qwen3", "transformers.tokenization_utils_tokenizers",
           "xgrammar", "triton", "triton.language"]


def mp_context(method: str) -> Any:
    """The multiprocessing context for `method` ("spawn" or "forkserver")."""
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)  # no effect once this process's forkserver runs
    return ctx


def child_args(target: str, args: tuple) -> tuple:
    """The Process args that make `child_entry` call `target` ("module:function") with `args`, then the
    readiness pipe and parent pid appended by the caller."""
    return (target, pickle.dumps(args), dict(os.environ))


def child_entry(target: str, payload: bytes, env: dict[str, str], *tail: Any) -> None:
    """A child's first code: the parent's environment, then its module and arguments."""
    os.environ.clear()
    os.environ.update(env)
    module, name = target.split(":")
    func = getattr(importlib.import_module(module), name)
    func(*pickle.loads(payload), *tail)
