"""What every child process (scheduler, detokenizer) does around its event loop.

1. A watchdog thread exits the process when the parent is gone (children die with it).
2. The child builds its manager; a startup exception is sent back over the readiness
   pipe as `ProcessFailed` with the formatted traceback, so the parent re-raises it.
3. Otherwise it sends `ProcessReady` and runs the event loop until killed.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Callable, Protocol

from radixlm.managers.io_struct import ProcessFailed, ProcessReady

logger = logging.getLogger(__name__)

WATCHDOG_INTERVAL_S = 0.5


class ServingProcess(Protocol):
    def ready_info(self) -> dict: ...

    def event_loop(self) -> None: ...


def start_parent_watchdog(parent_pid: int) -> threading.Thread:
    """Exit when `parent_pid` is gone or this process was re-parented. The parent is the launching
    process; under forkserver the immediate parent is the forkserver, which exits with the launcher."""
    first_ppid = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(WATCHDOG_INTERVAL_S)
            if os.getppid() != first_ppid or not _pid_alive(parent_pid):
                os._exit(0)

    thread = threading.Thread(target=watch, name="parent-watchdog", daemon=True)
    thread.start()
    return thread


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_child(name: str, build: Callable[[], ServingProcess], ready_pipe: Connection, parent_pid: int,
              log_level: str = "info") -> None:
    """Entry point body of a child process (called from its picklable top-level target)."""
    logging.basicConfig(level=log_level.upper(), format=f"[%(asctime)s {name}] %(levelname)s %(message)s")
    start_parent_watchdog(parent_pid)
    try:
        proc = build()
        info = proc.ready_info()
    except BaseException:
        ready_pipe.send(ProcessFailed(name=name, traceback=traceback.format_exc()))
        ready_pipe.close()
        raise SystemExit(1)
    ready_pipe.send(ProcessReady(name=name, info=info))
    ready_pipe.close()
    try:
        proc.event_loop()
    except BaseException:
        logger.error("%s crashed:\n%s", name, traceback.format_exc())
        raise
