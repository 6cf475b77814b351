"""The one place that reads environment variables (all prefixed RADIXLM_)."""

from __future__ import annotations

import os


def _get(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"RADIXLM_{name}", default)


def cache_dir() -> str:
    """Where converted model folders are cached."""
    return _get("CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "radixlm")


def ipc_dir() -> str:
    """Where per-instance ZMQ ipc:// socket files are created."""
    return _get("IPC_DIR") or "/tmp"


def test_server_timeout_s() -> float:
    return float(_get("TEST_SERVER_TIMEOUT_S", "300"))
