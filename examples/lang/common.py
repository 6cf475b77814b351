"""Backend selection shared by the frontend examples: `--url` for a running server,
else an in-process Engine over `--model-path` (default: the embedded SmolLM2)."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Optional

import radixlm as rl
from radixlm.lang import BaseBackend


def backend_from_cli(description: str, argv: Optional[list[str]] = None) -> BaseBackend:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--url", help="a running radixlm server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--api-key", default=None, help="the server's --api-key, if it has one")
    parser.add_argument("--model-path", default=None, help="model for the in-process Engine (default: embedded)")
    args = parser.parse_args(argv)
    if args.url:
        return rl.RuntimeEndpoint(args.url, api_key=args.api_key)
    return rl.EngineBackend(model_path=args.model_path)


def run_example(main: Callable[[Any], Any], description: str) -> None:
    """Run `main(backend)` with the backend the command line asks for, then shut it down."""
    backend = backend_from_cli(description)
    try:
        main(backend)
    finally:
        backend.shutdown()
