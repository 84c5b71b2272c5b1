"""``python -m worker.launch_driver``: a Ray job's entrypoint, which runs ``worker.driver`` in a
warm process forked from the node's driver template (``worker.warm``), or in this process.

The driver imports Ray, Ray Train and our driver code (~1-2 s of CPU) before it can start the
Train controller; a child of the driver template has them already. This process imports
only the standard library and ``worker.warm``; it hands the child its environment, cwd and
stdout/stderr (the Ray job's log), forwards the job supervisor's signals (a stop is SIGTERM,
then SIGKILL) to it, and ends as it ends: the same exit code, or killed by the same signal.
If this process is killed, the zygote kills the driver (see ``worker.warm.zygote``).
``SHUNTER_WARM_DRIVERS=0`` runs the driver here, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from worker import warm

__all__ = ["main", "run"]

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _in_process() -> int:
    from worker.driver import main as driver_main

    return driver_main()


def _refuse(request: Any) -> Any:
    raise ValueError(f"the driver asks its entrypoint nothing (got {request!r})")


def _end_as(exit: warm.Exit) -> int:
    if exit.signal is not None:  # die of the same signal, as the driver did
        signal.signal(exit.signal, signal.SIG_DFL)
        os.kill(os.getpid(), exit.signal)
    return exit.code if exit.code is not None else 1


def run(
    kind: str, target: str, fallback: Callable[[], int], *, modules: list[str] | None = None
) -> int:
    """Run ``target`` in a warm child of ``kind``'s template (``modules``, by default
    ``warm.TEMPLATES[kind]``) as if it were this process: its exit code, or its death by the
    same signal; ``fallback()`` when no child can be had."""
    try:
        child = warm.spawn(
            kind,
            target,
            modules=modules if modules is not None else warm.TEMPLATES[kind],
            watch_pid=warm.find_raylet(),
            idle_s=float(os.environ.get("SHUNTER_WARM_IDLE_S", "900")),
        )
    except warm.WarmUnavailable as e:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
        logging.getLogger(__name__).warning("running in-process: %s", e)
        return fallback()

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signum)

    for sig in _FORWARDED:
        signal.signal(sig, forward)
    try:
        code = warm.serve(child, _refuse)
    except warm.WorkerProcessDied as e:
        return _end_as(e.exit)
    return int(code)


def main() -> int:
    if not warm.enabled("driver"):
        return _in_process()
    return run("driver", "worker.driver:warm_main", _in_process)


if __name__ == "__main__":
    sys.exit(main())
