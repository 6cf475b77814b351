"""Model registry: the config's `architectures` name -> model class."""

from __future__ import annotations

import importlib

from torch import nn

# architecture -> (module under radixlm.models, class name); modules import lazily
_MODELS: dict[str, tuple[str, str]] = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "MistralForCausalLM": ("llama", "MistralForCausalLM"),
    "Qwen2ForCausalLM": ("qwen2", "Qwen2ForCausalLM"),
    "Qwen3ForCausalLM": ("qwen3", "Qwen3ForCausalLM"),
}


def supported_architectures() -> list[str]:
    return sorted(_MODELS)


def get_model_class(arch: str) -> type[nn.Module]:
    """The class for an architecture name; ValueError naming it when unsupported."""
    if arch not in _MODELS:
        raise ValueError(f"unsupported model architecture {arch!r}; supported: {', '.join(supported_architectures())}")
    module, name = _MODELS[arch]
    return getattr(importlib.import_module(f"radixlm.models.{module}"), name)


def resolve_model_class(architectures: list[str] | None) -> type[nn.Module]:
    """The first supported entry of a config's `architectures` list."""
    for arch in architectures or []:
        if arch in _MODELS:
            return get_model_class(arch)
    raise ValueError(f"unsupported model architectures {architectures!r}; "
                     f"supported: {', '.join(supported_architectures())}")
