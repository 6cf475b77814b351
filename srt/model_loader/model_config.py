"""ModelConfig: the facts about a model that the runtime needs, read once from its folder."""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any

import torch

from radixlm.model_loader.resolve import resolve_model_dir

if TYPE_CHECKING:
    from radixlm.server_args import ServerArgs

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class ModelConfig:
    """Hugging Face config plus resolved dtype, context length, head layout and EOS ids."""

    def __init__(self, model_dir: str | None, dtype: str = "auto", context_length: int | None = None,
                 device: str | None = None, trust_remote_code: bool = False) -> None:
        from transformers import AutoConfig

        model_dir = resolve_model_dir(model_dir)  # also accepts None (embedded) or a .gguf
        self.model_dir = model_dir
        self.hf_config = AutoConfig.from_pretrained(model_dir, trust_remote_code=trust_remote_code)
        cfg = self.hf_config
        self.architecture: str = (getattr(cfg, "architectures", None) or [type(cfg).__name__])[0]
        self.vocab_size: int = cfg.vocab_size
        self.hidden_size: int = cfg.hidden_size
        self.num_hidden_layers: int = cfg.num_hidden_layers
        self.num_attention_heads: int = cfg.num_attention_heads
        self.num_key_value_heads: int = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
        self.head_dim: int = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.context_len: int = _context_len(cfg, context_length)
        self.dtype: torch.dtype = resolve_dtype(dtype, _config_dtype(cfg), device)
        self.eos_token_ids: set[int] = _eos_token_ids(cfg, model_dir)

    @classmethod
    def from_server_args(cls, server_args: "ServerArgs") -> "ModelConfig":
        device = None if server_args.device == "auto" else server_args.device
        return cls(server_args.model_path, dtype=server_args.dtype,
                   context_length=server_args.context_length, device=device,
                   trust_remote_code=server_args.trust_remote_code)

    def __repr__(self) -> str:
        return (f"ModelConfig({self.architecture}, dir={self.model_dir}, dtype={self.dtype}, "
                f"context_len={self.context_len}, layers={self.num_hidden_layers}, "
                f"heads={self.num_attention_heads}/{self.num_key_value_heads}x{self.head_dim})")


def resolve_dtype(dtype: str, config_dtype: torch.dtype | None, device: str | None) -> torch.dtype:
    """Explicit dtype wins; "auto" is the config's dtype on CUDA and float32 on CPU."""
    if dtype != "auto":
        if dtype not in _DTYPES:
            raise ValueError(f"--dtype must be one of {['auto', *_DTYPES]}, got {dtype!r}")
        return _DTYPES[dtype]
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if not device.startswith("cuda"):
        return torch.float32
    return config_dtype or torch.float32


def _config_dtype(cfg: Any) -> torch.dtype | None:
    value = getattr(cfg, "dtype", None) or getattr(cfg, "torch_dtype", None)
    if isinstance(value, str):
        return _DTYPES.get(value)
    return value


def _context_len(cfg: Any, context_length: int | None) -> int:
    derived = getattr(cfg, "max_position_embeddings", None)
    if context_length is None:
        if derived is None:
            raise ValueError("config.json has no max_position_embeddings; pass --context-length")
        return int(derived)
    if derived is not None and context_length > derived:
        logger.warning("--context-length %d exceeds the model's max_position_embeddings %d",
                       context_length, derived)
    return int(context_length)


def _eos_token_ids(cfg: Any, model_dir: str) -> set[int]:
    ids = _as_id_set(getattr(cfg, "eos_token_id", None))
    path = os.path.join(model_dir, "generation_config.json")
    if os.path.isfile(path):
        with open(path) as f:
            ids |= _as_id_set(json.load(f).get("eos_token_id"))
    return ids


def _as_id_set(value: int | list[int] | None) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, (list, tuple)) else {int(value)}
