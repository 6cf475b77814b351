"""Build a model from a ModelConfig and fill its weights (checkpoint or seeded dummy)."""

from __future__ import annotations

import contextlib
import logging
import time
import zlib
from typing import TYPE_CHECKING, Iterator

import torch
from torch import nn

from radixlm.model_loader.weights import iterate_weights

if TYPE_CHECKING:
    from radixlm.model_loader.model_config import ModelConfig

logger = logging.getLogger(__name__)

CHECKPOINT_FORMATS = ("auto", "safetensors", "gguf")  # a .gguf is already converted by resolve
DUMMY_SEED = 0
DUMMY_STD = 0.02


def load_model(model_config: "ModelConfig", load_format: str = "auto", device: str = "cpu",
               tp_rank: int = 0, tp_size: int = 1) -> nn.Module:
    """Instantiate the registered class for the config's architecture on `device` and load it."""
    from radixlm.models.registry import get_model_class

    if load_format not in (*CHECKPOINT_FORMATS, "dummy"):
        raise ValueError(f"--load-format must be one of {(*CHECKPOINT_FORMATS, 'dummy')}, got {load_format!r}")
    start = time.perf_counter()
    model_class = get_model_class(model_config.architecture)
    with _default_dtype(model_config.dtype), torch.device(device):
        model = model_class(model_config.hf_config, tp_rank, tp_size)
    if load_format == "dummy":
        init_dummy_weights(model)
    else:
        model.load_weights(iterate_weights(model_config.model_dir))
    model.eval()
    logger.info("Loaded %s (%s, %s) on %s in %.2f s", model_config.architecture, load_format,
                model_config.dtype, device, time.perf_counter() - start)
    return model


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@torch.no_grad()
def init_dummy_weights(model: nn.Module, seed: int = DUMMY_SEED) -> None:
    """Seeded random weights: N(0, 0.02) for matrices, ones for norm weights, zeros otherwise.

    Each parameter is drawn on its own device from a generator seeded by (seed, name), so
    the values do not depend on parameter order, the global RNG is untouched, and an 8B
    model fills in well under a second on a GPU (drawing it on one CPU generator took minutes).
    """
    for name, param in model.named_parameters():
        if param.dim() >= 2:
            generator = torch.Generator(device=param.device).manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            param.normal_(0.0, DUMMY_STD, generator=generator)
        elif "norm" in name and name.endswith("weight"):
            param.fill_(1.0)
        else:
            param.zero_()
