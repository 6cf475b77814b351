"""Turn a `--model-path` into a Hugging Face-style folder radixlm can load."""

from __future__ import annotations

import os

from radixlm.model_loader.embedded import EMBEDDED_MODEL_NAME, embedded_gguf_path
from radixlm.model_loader.gguf_convert import convert_gguf


def default_model_name() -> str:
    """The served name of the embedded model (used when --model-path is not given)."""
    return EMBEDDED_MODEL_NAME


def resolve_model_dir(model_path: str | None) -> str:
    """None -> the embedded SmolLM2; a `.gguf` file -> its cached conversion; a folder -> itself.

    Raises FileNotFoundError naming the path when it does not exist.
    """
    if model_path is None:
        return convert_gguf(embedded_gguf_path())
    path = os.path.expanduser(model_path)
    if os.path.isdir(path):
        return path
    if os.path.isfile(path) and path.endswith(".gguf"):
        return convert_gguf(path)
    if os.path.isfile(path):
        raise ValueError(f"Model path {model_path!r} is a file but not a .gguf; pass a model folder or a GGUF file")
    raise FileNotFoundError(f"Model path not found: {model_path!r} (expected a model folder or a .gguf file)")
