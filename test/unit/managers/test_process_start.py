"""How serving children start (radixlm/managers/process_start.py), with real child processes.

A forkserver is started by this process's first forkserver child and keeps the environment, directory
and import path of that moment: a later child must still see the parent's current ones, and find the
heavy third-party modules already imported (the preload), under both start methods.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from radixlm.managers.child_process import start_parent_watchdog
from radixlm.managers.process_start import child_args, child_entry, mp_context

TARGET = f"{Path(__file__).stem}:report"


def report(key: str, ready_pipe: Any, parent_pid: int) -> None:
    """A child target: what this child sees, sent back over the pipe."""
    ready_pipe.send({"value": os.environ.get(key), "cwd": os.getcwd(), "parent_pid": parent_pid,
                     "path_has_tests": str(Path(__file__).parent) in sys.path,
                     "preloaded": "xgrammar" in sys.modules and "torch" in sys.modules})
    ready_pipe.close()


def run_child(method: str, key: str) -> dict:
    ctx = mp_context(method)
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child_entry, args=(*child_args(TARGET, (key,)), writer, os.getpid()), daemon=True)
    proc.start()
    writer.close()
    assert reader.poll(120), f"{method} child sent nothing (exit code {proc.exitcode})"
    seen = reader.recv()
    proc.join(30)
    assert proc.exitcode == 0
    return seen


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_child_sees_the_parents_current_environment_directory_and_path(
        method: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = "RADIXLM_TEST_PROCESS_START_PROBE"
    monkeypatch.delenv(key, raising=False)
    first = run_child(method, key)  # under forkserver this starts the server with the current environment
    assert first["value"] is None and first["cwd"] == os.getcwd()
    monkeypatch.setenv(key, "changed after the first child")
    monkeypatch.chdir(tmp_path)
    second = run_child(method, key)
    assert second["value"] == "changed after the first child"
    assert second["cwd"] == str(tmp_path)
    assert second["path_has_tests"] and second["parent_pid"] == os.getpid()
    if method == "forkserver":
        assert second["preloaded"], "the forkserver's preload did not reach the child"


def test_the_watchdog_exits_a_child_whose_launcher_is_gone() -> None:
    """Under forkserver the child's parent is the forkserver: the watchdog must follow the launcher's pid."""
    ctx = mp_context("forkserver")
    launcher = ctx.Process(target=_sleep, args=(60.0,), daemon=True)
    launcher.start()
    child = ctx.Process(target=_watch_then_sleep, args=(launcher.pid,), daemon=True)
    child.start()
    child.join(3.0)
    assert child.is_alive(), "the watchdog exited while the launcher was alive"
    launcher.kill()
    launcher.join(10)
    child.join(10)
    assert not child.is_alive() and child.exitcode == 0


def _sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def _watch_then_sleep(launcher_pid: int) -> None:
    start_parent_watchdog(launcher_pid)
    _sleep(60.0)
