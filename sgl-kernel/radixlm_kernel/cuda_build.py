"""Build-and-cache for the package's CUDA C++ extensions (`cuda_gemv`, `cuda_decode`): torch's JIT loader
compiles the sources once; the shared object is kept under `kernels/` of radixlm's cache folder
(`$RADIXLM_CACHE_DIR`, default `~/.cache/radixlm`, the same variable `radixlm.environ` reads; this package
cannot import radixlm), named by a hash of the sources, torch, CUDA and the GPU architecture, so a later
process loads it without compiling.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from types import ModuleType

import torch

CSRC = os.path.join(os.path.dirname(__file__), "csrc")


def csrc(*names: str) -> list[str]:
    return [os.path.join(CSRC, name) for name in names]


def cache_dir() -> str:
    root = os.environ.get("RADIXLM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "radixlm")
    return os.path.join(root, "kernels")


def build_key(files: list[str], arch: str) -> str:
    digest = hashlib.sha256()
    for path in files:
        with open(path, "rb") as f:
            digest.update(f.read())
    digest.update(f"{torch.__version__}|{torch.version.cuda}|{arch}".encode())
    return digest.hexdigest()[:16]


def _import_so(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(name: str, sources: list[str], arch: str, target: str) -> ModuleType:
    from torch.utils.cpp_extension import load as load_extension

    with tempfile.TemporaryDirectory(prefix=f"{name}_") as build_dir:
        module = load_extension(name=name, sources=sources, build_directory=build_dir, verbose=False,
                                extra_cuda_cflags=["-O3", arch], extra_include_paths=[CSRC])
        os.makedirs(os.path.dirname(target), exist_ok=True)
        staged = f"{target}.{os.getpid()}.tmp"
        shutil.copyfile(module.__file__, staged)
        os.replace(staged, target)  # atomic: concurrent ranks may build at once
    return module


def load_cached(prefix: str, sources: list[str], headers: list[str]) -> ModuleType:
    """The extension built from `sources` for this GPU, from the cache or built now (raises where it cannot be
    built: no nvcc, no ninja)."""
    major, minor = torch.cuda.get_device_capability()
    arch = f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"
    name = f"{prefix}_{build_key(sources + headers, arch)}"
    target = os.path.join(cache_dir(), f"{name}.so")
    return _import_so(name, target) if os.path.exists(target) else _build(name, sources, arch, target)
