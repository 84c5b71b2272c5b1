"""``python -m launcher.head_guard PARENT_PID -- CMD ...``: run CMD, and stop its whole process
group when the process PARENT_PID (the service) is gone.

The embedded Ray head runs in a session of its own, so that the service can stop all of it
(``ray start``, GCS, raylet, dashboard, workers) with one ``killpg``. A service killed with
SIGKILL cannot do that, and the head would live on, holding ports and CPUs. This guard leads
that process group: it notices within a second that it was re-parented (its parent died), then
sends the group SIGTERM and, after a grace period, SIGKILL. It exits with CMD's status when
CMD ends by itself, and dies with the group when the service stops the head normally.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

__all__ = ["main"]

GRACE_S = 5.0


def _stop_group() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is not for us
    os.killpg(os.getpgrp(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os.killpg(os.getpgrp(), signal.SIGKILL)  # ends this process too


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m launcher.head_guard PARENT_PID -- CMD ...", file=sys.stderr)
        return 2
    parent = int(args[0])
    child = subprocess.Popen(args[2:])  # stays in our process group
    while True:
        try:
            return child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != parent:  # re-parented: the service is gone
            _stop_group()
            return 0


if __name__ == "__main__":
    sys.exit(main())
