"""`python -m radixlm.launch_server` / `radixlm-server`: start the processes and serve HTTP.

Startup: parse SGLang's flags, resolve and validate them, spawn the scheduler and
detokenizer, serve the FastAPI app with uvicorn, send one warm-up request (two with `--enable-mixed-chunk`;
none with `--skip-server-warmup`), then log that the server is ready. SIGTERM or SIGINT stop
uvicorn gracefully, the children are terminated, and the process exits 0.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import urllib.request
from typing import Any, Optional

import uvicorn

from radixlm import environ
from radixlm.server_args import ServerArgs

logger = logging.getLogger("radixlm.launch_server")

READY_MESSAGE = "The server is fired up and ready to roll!"
WARMUP_TIMEOUT_S = 600.0
CHILD_DEATH_GRACE_S = 2.0


def parse_args(argv: Optional[list[str]] = None) -> ServerArgs:
    parser = argparse.ArgumentParser(prog="radixlm-server", description="radixlm OpenAI-compatible server")
    ServerArgs.add_cli_args(parser)
    server_args = ServerArgs.from_cli_args(parser.parse_args(argv)).resolved()
    try:
        server_args.validate()
    except ValueError as exc:
        parser.error(str(exc))
    if server_args.chat_template is not None and not os.path.isfile(server_args.chat_template):
        parser.error(f"--chat-template file not found: {server_args.chat_template!r}")
    return server_args


def base_url(server_args: ServerArgs) -> str:
    host = server_args.host if server_args.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
    return f"http://{host}:{server_args.port}"


WARMUP_TEXT = "The capital city of France is"
WARMUP_TEXT_2 = "Rivers, mountains and lakes of Switzerland:"  # shares no prefix with WARMUP_TEXT: a real prefill


def warmup(server_args: ServerArgs, server: uvicorn.Server) -> bool:
    """Wait until uvicorn listens, then run one short generation through the HTTP path (with
    --enable-mixed-chunk, two: see `_warmup_mixed`)."""
    deadline = time.monotonic() + WARMUP_TIMEOUT_S
    while not server.started:
        if server.should_exit or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    if server_args.skip_server_warmup:
        return True
    try:
        if server_args.enable_mixed_chunk:
            _warmup_mixed(server_args)
        else:
            with _generate(server_args, max_new_tokens=4) as response:
                response.read()
    except Exception as exc:  # noqa: BLE001 -- any failure means the server cannot serve
        logger.error("Warm-up request failed: %s", exc)
        return False
    return True


def _warmup_mixed(server_args: ServerArgs) -> None:
    """A second request arrives while the first decodes, so that a MIXED batch (a prefill carrying the running
    decodes) runs before the server says it is ready: on a fresh GPU its kernels compile here, not in the first
    users' requests (a fresh H100 stalled the first MIXED batches for 0.3-2.8 s each; RESULTS.md, twenty-fifth
    session)."""
    with _generate(server_args, max_new_tokens=64, stream=True, ignore_eos=True) as first:
        first.readline()  # its first event: the prefill is done and it decodes
        with _generate(server_args, max_new_tokens=4, text=WARMUP_TEXT_2) as second:
            second.read()
        first.read()


def _generate(server_args: ServerArgs, max_new_tokens: int, stream: bool = False, ignore_eos: bool = False,
              text: str = WARMUP_TEXT) -> Any:
    """POST `text` to /generate (greedy); the open response."""
    params = {"max_new_tokens": max_new_tokens, "temperature": 0, "ignore_eos": ignore_eos}
    body = {"text": text, "sampling_params": params, "stream": stream}
    headers = {"Content-Type": "application/json"}
    if server_args.api_key:
        headers["Authorization"] = f"Bearer {server_args.api_key}"
    request = urllib.request.Request(base_url(server_args) + "/generate", data=json.dumps(body).encode(),
                                     headers=headers, method="POST")
    return urllib.request.urlopen(request, timeout=WARMUP_TIMEOUT_S)


def _warmup_thread(server_args: ServerArgs, server: uvicorn.Server, outcome: dict) -> threading.Thread:
    def run() -> None:
        outcome["ok"] = warmup(server_args, server)
        if outcome["ok"]:
            logger.info(READY_MESSAGE)
        elif not server.should_exit:
            server.should_exit = True

    thread = threading.Thread(target=run, name="radixlm-warmup", daemon=True)
    thread.start()
    return thread


def _child_watchdog(tokenizer_manager: Any, server: uvicorn.Server, outcome: dict) -> threading.Thread:
    """A dead child (a scheduler rank, the detokenizer) stops the server with a non-zero exit,
    after a short grace period in which in-flight requests get their error and /health is 503."""
    def run() -> None:
        while not server.should_exit:
            if not tokenizer_manager.is_healthy():
                logger.error("FATAL: %s; shutting down", tokenizer_manager.dead_reason)
                time.sleep(CHILD_DEATH_GRACE_S)
                outcome["ok"] = False
                server.should_exit = True
                return
            time.sleep(0.5)

    thread = threading.Thread(target=run, name="radixlm-child-watchdog", daemon=True)
    thread.start()
    return thread


def _ignore_reraised_signals() -> None:
    """uvicorn re-raises the signal that stopped it once it has shut down; we then clean up
    and exit 0 ourselves instead of dying by the default handler."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: None)


def serve(server_args: ServerArgs) -> int:
    from radixlm.entrypoints.http_server import create_app
    from radixlm.entrypoints.launch import launch_subprocesses

    tokenizer_manager, children = launch_subprocesses(server_args)
    outcome: dict[str, Any] = {"ok": None}
    try:
        app = create_app(tokenizer_manager, server_args)
        loop, http = environ.uvicorn_loop_http()
        config = uvicorn.Config(app, host=server_args.host, port=server_args.port,
                                log_level=server_args.log_level, timeout_keep_alive=5, loop=loop, http=http)
        server = uvicorn.Server(config)
        _warmup_thread(server_args, server, outcome)
        _child_watchdog(tokenizer_manager, server, outcome)
        _ignore_reraised_signals()
        server.run()
    finally:
        logger.info("Shutting down: terminating child processes")
        tokenizer_manager.close()
        children.shutdown()
    return 1 if outcome["ok"] is False else 0


def main(argv: Optional[list[str]] = None) -> None:
    server_args = parse_args(argv)
    logging.basicConfig(level=server_args.log_level.upper(),
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    sys.exit(serve(server_args))


if __name__ == "__main__":
    main()
