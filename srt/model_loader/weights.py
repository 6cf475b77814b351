"""Iterate a checkpoint's tensors by Hugging Face name, lazily, one file at a time.

Order of preference: `model.safetensors.index.json` (sharded), `*.safetensors`,
`pytorch_model.bin.index.json`, `*.bin`. Each tensor is read when the consumer asks for
it, so a tensor-parallel rank can slice and drop it before the next one is read.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Iterator

import torch

SAFETENSORS_INDEX = "model.safetensors.index.json"
BIN_INDEX = "pytorch_model.bin.index.json"


def weight_files(model_dir: str) -> list[str]:
    """The checkpoint files of `model_dir`; FileNotFoundError naming what is missing."""
    if not os.path.isdir(model_dir):
        raise FileNotFoundError(f"Model folder not found: {model_dir}")
    for index in (SAFETENSORS_INDEX, BIN_INDEX):
        index_path = os.path.join(model_dir, index)
        if os.path.isfile(index_path):
            return _files_from_index(index_path)
    for pattern in ("*.safetensors", "*.bin"):
        files = sorted(glob.glob(os.path.join(model_dir, pattern)))
        if files:
            return files
    raise FileNotFoundError(f"No weight files (*.safetensors or *.bin) in model folder {model_dir}")


def _files_from_index(index_path: str) -> list[str]:
    with open(index_path) as f:
        weight_map: dict[str, str] = json.load(f)["weight_map"]
    folder = os.path.dirname(index_path)
    files = [os.path.join(folder, name) for name in sorted(set(weight_map.values()))]
    for path in files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Weight file {path} listed in {index_path} is missing")
    return files


def iterate_weights(model_dir: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield (HF parameter name, CPU tensor) for every tensor of the checkpoint."""
    for path in weight_files(model_dir):
        if path.endswith(".safetensors"):
            yield from _iterate_safetensors(path)
        else:
            yield from _iterate_bin(path)


def _iterate_safetensors(path: str) -> Iterator[tuple[str, torch.Tensor]]:
    from safetensors import safe_open

    with safe_open(path, framework="pt", device="cpu") as f:
        for name in f.keys():
            yield name, f.get_tensor(name)


def _iterate_bin(path: str) -> Iterator[tuple[str, torch.Tensor]]:
    state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    yield from state.items()
