"""Backends of the frontend language: a server over HTTP, or an in-process Engine."""

from radixlm.lang.backend.base import BaseBackend
from radixlm.lang.backend.runtime_endpoint import RuntimeEndpoint


def __getattr__(name: str):
    if name == "EngineBackend":  # keeps torch out of `import radixlm.lang`
        from radixlm.lang.backend.engine_backend import EngineBackend

        return EngineBackend
    raise AttributeError(name)


__all__ = ["BaseBackend", "RuntimeEndpoint", "EngineBackend"]
