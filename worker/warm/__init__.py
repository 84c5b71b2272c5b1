"""Warm processes: a per-node zygote forks each job's training process from a template that
has already imported torch, transformers, datasets and trainer_core (issue #22).

Why: those imports are ~4-5 s of CPU in every Ray Train worker of every job, on the path
from submit to the first step, and Ray does not reuse a worker process across jobs. Forking
a template that imported them and ran nothing else gives each job a fresh process in
milliseconds without giving up isolation: nothing a job does happens in the template, so no
job can see another's module globals, seeds, environment, files or process groups
(``tests/worker/test_warm.py`` checks each).

    requester (the Ray Train worker actor)        zygote (per node and template)
      spawn(kind, target) --- control socket ---> fork() -> child: requester's env, cwd,
      serve(child, handle) <--- channel ----------------->   stdout/stderr; runs target(channel)

- ``spawn`` (``worker.warm.client``) finds the template's zygote or starts it (one starter
  at a time, a lock file) and asks it for a child; ``WarmUnavailable`` means run in-process.
- ``serve`` answers the child's ``call``s (what must happen in the requester: Ray Train's
  ``report``) until the child says ``done`` (its result) or ``failed`` (its exception, carried
  as Ray carries a worker's, so ``worker.classify`` judges it the same), or dies: a child
  killed by a signal raises ``WorkerProcessDied`` (``infra_lost``).
- The child dies with its requester, the zygote with the node's raylet (see
  ``worker.warm.zygote``).

``SHUNTER_WARM_WORKERS=0`` (in the workers' environment) turns it off: the training function
runs in the Ray worker process itself, as before.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

from worker.warm.client import Child, Exit, WarmUnavailable, find_raylet, spawn
from worker.warm.protocol import ProtocolError, recv_obj, send_obj, uncarry

__all__ = [
    "TEMPLATES",
    "Child",
    "Exit",
    "WarmUnavailable",
    "WorkerProcessDied",
    "call",
    "enabled",
    "find_raylet",
    "payload",
    "serve",
    "spawn",
]

# What each kind's template imports: what the processes forked from it would import first.
# Nothing here may initialise CUDA at import (the zygote checks after each module).
TEMPLATES: dict[str, list[str]] = {
    "train": [
        "torch",
        "torch.distributed",
        "transformers",
        "datasets",
        "trainer_core.loop",
        "transformers.models.llama.modeling_llama",
        "worker.train_fn",
        "worker.ray_reporter",
    ],
    # The Ray job's driver (worker.launch_driver): Ray, Ray Train and our driver; no torch.
    "driver": [
        "ray",
        "ray.train",
        "ray.train.v2.api.data_parallel_trainer",
        "worker.driver",
        "worker.ray_trainer",
        "worker.checkpoint_callback",
        "worker.train_fn",
        "worker.staging",
    ],
}
_SWITCHES = {"train": "SHUNTER_WARM_WORKERS", "driver": "SHUNTER_WARM_DRIVERS"}
_OFF = {"0", "false", "no", "off"}


class WorkerProcessDied(RuntimeError):
    """The forked process ended without a result (killed by a signal, or it exited before it
    could say why): a lost worker, as when Ray loses a worker process."""

    def __init__(self, pid: int, exit: Exit) -> None:
        super().__init__(f"the warm process (pid {pid}) died: {exit}")
        self.pid, self.exit = pid, exit

    def __reduce__(self) -> tuple[Any, tuple[int, Exit]]:
        return (WorkerProcessDied, (self.pid, self.exit))


def enabled(kind: str, env: dict[str, str] | None = None) -> bool:
    """Whether ``kind`` runs warm here (on by default; Linux only)."""
    value = (env if env is not None else os.environ).get(_SWITCHES[kind], "1")
    return sys.platform == "linux" and value.strip().lower() not in _OFF


def serve(
    child: Child, handle: Callable[[Any], Any], *, payload: Any = None, exit_wait_s: float = 30.0
) -> Any:
    """Send ``child`` its ``payload`` (its first message, ``payload(channel)`` there), then
    answer its calls with ``handle(request)`` until it ends; return its result, or raise its
    exception. Kills the child if this raises for any other reason (``handle`` failed, this
    thread was interrupted), so a child never outlives the call that owns it."""
    try:
        send_obj(child.channel, payload)
        while True:
            try:
                op, body = recv_obj(child.channel)
            except (OSError, ProtocolError, EOFError):
                raise WorkerProcessDied(child.pid, child.wait()) from None
            if op == "call":
                send_obj(child.channel, handle(body))
                continue
            child.wait(exit_wait_s)  # its exit handlers run; then it is reaped
            if op == "failed":
                raise uncarry(body)
            return body
    except BaseException:
        child.kill()
        raise
    finally:
        child.close()


_call_lock = threading.Lock()


def payload(channel: socket.socket) -> Any:
    """In a child: what its requester passed to ``serve`` (read it first, once)."""
    return recv_obj(channel)


def call(channel: socket.socket, request: Any) -> Any:
    """In a child: ask the requester to do ``request`` (its ``handle``) and return its answer."""
    with _call_lock:
        send_obj(channel, ("call", request))
        return recv_obj(channel)
