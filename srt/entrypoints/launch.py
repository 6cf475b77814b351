"""Start the serving processes shared by the Engine and the HTTP server.

`launch_subprocesses(server_args) -> (TokenizerManager, ChildProcesses)` spawns this
node's scheduler ranks and the detokenizer, waits for each to report ready over its pipe
(a startup exception comes back as the child's traceback and is re-raised here), and
builds the TokenizerManager in this process. Children exit when this process dies
(their watchdog); a child that dies first makes the TokenizerManager unhealthy.

Tensor parallelism (`--tp-size N`): one scheduler process per rank; with `--nnodes`,
this node starts only ranks `[node_rank * N/nnodes, (node_rank + 1) * N/nnodes)` and
all join at `--dist-init-addr`. A node with `node_rank > 0` runs no front end: it
blocks here until its ranks end (rank 0 stopped them, or one failed) and then raises
`SystemExit` with 0 or 1, so `radixlm.launch_server` and `Engine` need no special case.
Readiness covers every rank: rank 0 reports ready only after an all-gather over all ranks.
"""

from __future__ import annotations

import logging
import dataclasses
import os
import socket
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from radixlm import environ
from radixlm.managers.io_struct import ProcessFailed, ProcessReady
from radixlm.managers.ports import PortArgs
from radixlm.managers.process_start import child_args, child_entry, mp_context
from radixlm.server_args import ServerArgs

logger = logging.getLogger(__name__)

STARTUP_TIMEOUT_S = 600.0
SCHEDULER_TARGET = "radixlm.managers.scheduler:run_scheduler_process"
DETOKENIZER_TARGET = "radixlm.managers.detokenizer_manager:run_detokenizer_process"
NODE_WATCH_INTERVAL_S = 0.5


@dataclass
class ChildProcesses:
    """The spawned children, by name, and the ipc paths they use."""

    port_args: PortArgs
    procs: dict[str, Any] = field(default_factory=dict)
    ready_info: dict[str, dict] = field(default_factory=dict)

    def dead_reason(self) -> Optional[str]:
        for name, proc in self.procs.items():
            if not proc.is_alive():
                return f"{name} process (pid {proc.pid}) exited with code {proc.exitcode}"
        return None

    def shutdown(self, timeout_s: float = 10.0) -> None:
        for proc in self.procs.values():
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        self.port_args.remove_files()

    def wait_all(self) -> int:
        """Block until every child has exited: 0 if all exited cleanly, else 1 (the rest are stopped)."""
        while True:
            failed = [f"{n} (pid {p.pid}) exited with code {p.exitcode}" for n, p in self.procs.items()
                      if not p.is_alive() and p.exitcode != 0]
            if failed:
                logger.error("FATAL: %s; stopping this node's other ranks", "; ".join(failed))
                self.shutdown()
                return 1
            if not any(p.is_alive() for p in self.procs.values()):
                return 0
            time.sleep(NODE_WATCH_INTERVAL_S)


def _start(ctx: Any, children: ChildProcesses, name: str, target: str, args: tuple) -> Any:
    """Start child `name` running `target` ("module:function") with `args`, its readiness pipe and our pid."""
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=child_entry, args=(*child_args(target, args), writer, os.getpid()),
                       name=f"radixlm-{name}", daemon=True)
    proc.start()
    writer.close()
    children.procs[name] = proc
    return reader


def _wait_ready(children: ChildProcesses, pipes: dict[str, Any], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for name, pipe in pipes.items():
        proc = children.procs[name]
        while not pipe.poll(0.2):
            if not proc.is_alive() and not pipe.poll(0.5):
                raise RuntimeError(f"{name} process died during startup (exit code {proc.exitcode})")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} process did not become ready within {timeout_s:.0f} s")
        try:
            msg = pipe.recv()
        except EOFError:
            raise RuntimeError(f"{name} process closed its readiness pipe without reporting (exit code "
                               f"{proc.exitcode}); children import the main script (spawn and forkserver both do), "
                               f"so a script that starts an Engine must do so under "
                               f"`if __name__ == '__main__':`") from None
        if isinstance(msg, ProcessFailed):
            raise RuntimeError(f"{name} process failed to start; its traceback:\n{msg.traceback}")
        assert isinstance(msg, ProcessReady), msg
        children.ready_info[name] = msg.info


def local_tp_ranks(server_args: ServerArgs) -> range:
    """The tensor-parallel ranks this node runs (its GPU i serves rank `node_rank * per_node + i`)."""
    per_node = server_args.tp_size_per_node
    return range(server_args.node_rank * per_node, (server_args.node_rank + 1) * per_node)


def _with_dist_init_addr(server_args: ServerArgs) -> ServerArgs:
    """Single node, no --dist-init-addr: a free loopback port, so two servers never share a rendezvous."""
    if server_args.tp_size == 1 or server_args.dist_init_addr:
        return server_args
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return dataclasses.replace(server_args, dist_init_addr=f"127.0.0.1:{port}")


def _serve_non_zero_node(server_args: ServerArgs, children: ChildProcesses, pipes: dict[str, Any]) -> None:
    """node_rank > 0: no front end; run the local ranks until they end, then exit with their status."""
    try:
        _wait_ready(children, pipes, STARTUP_TIMEOUT_S)
    except BaseException:
        children.shutdown()
        raise
    logger.info("node %d: scheduler ranks %s ready; serving until rank 0 stops", server_args.node_rank,
                list(local_tp_ranks(server_args)))
    code = children.wait_all()
    children.shutdown()
    logger.info("node %d: scheduler ranks ended (exit %d)", server_args.node_rank, code)
    raise SystemExit(code)


def launch_subprocesses(server_args: ServerArgs) -> tuple[Any, ChildProcesses]:
    from radixlm.managers.tokenizer_manager import TokenizerManager

    server_args = _with_dist_init_addr(server_args.resolved())
    server_args.validate()
    if server_args.tp_size > 1 and server_args.device == "cuda":
        environ.set_default_nccl_env()  # before the ranks start; they inherit it
    port_args = PortArgs.new()
    ctx = mp_context(environ.mp_start_method(server_args.device))
    children = ChildProcesses(port_args)
    pipes: dict[str, Any] = {}
    try:
        for rank in local_tp_ranks(server_args):
            pipes[f"scheduler-tp{rank}"] = _start(ctx, children, f"scheduler-tp{rank}", SCHEDULER_TARGET,
                                                  (server_args, port_args, rank))
        if server_args.node_rank > 0:
            _serve_non_zero_node(server_args, children, pipes)
        pipes["detokenizer"] = _start(ctx, children, "detokenizer", DETOKENIZER_TARGET,
                                      (server_args, port_args))
        tokenizer_manager = TokenizerManager(server_args, port_args)  # loads while the children start
        _wait_ready(children, pipes, STARTUP_TIMEOUT_S)
    except BaseException:
        children.shutdown()
        raise
    tokenizer_manager.attach_children(children, children.ready_info.get("scheduler-tp0", {}))
    logger.info("radixlm ready: %s", children.ready_info.get("scheduler-tp0", {}))
    return tokenizer_manager, children
