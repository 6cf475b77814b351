"""The ZMQ endpoints of one server instance (unique ipc:// paths, so instances never collide)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

from radixlm import environ


@dataclass(frozen=True)
class PortArgs:
    scheduler_input_ipc: str  # TokenizerManager PUSH -> Scheduler (rank 0) PULL
    detokenizer_ipc: str  # Scheduler PUSH -> Detokenizer PULL
    tokenizer_ipc: str  # Detokenizer / Scheduler PUSH -> TokenizerManager PULL

    @staticmethod
    def new() -> "PortArgs":
        prefix = os.path.join(environ.ipc_dir(), f"radixlm-{os.getpid()}-{secrets.token_hex(4)}")
        return PortArgs(
            scheduler_input_ipc=f"ipc://{prefix}-scheduler",
            detokenizer_ipc=f"ipc://{prefix}-detokenizer",
            tokenizer_ipc=f"ipc://{prefix}-tokenizer",
        )

    def paths(self) -> list[str]:
        return [p[len("ipc://"):] for p in (self.scheduler_input_ipc, self.detokenizer_ipc, self.tokenizer_ipc)]

    def remove_files(self) -> None:
        for path in self.paths():
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
