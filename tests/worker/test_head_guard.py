"""launcher.head_guard: the embedded Ray head's process group dies with the service."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests.procs import group_alive, kill_group

REPO = Path(__file__).resolve().parents[2]

# A stand-in for the service: starts the guard (its own session, as RayHead does) over a
# long-running command, prints the guard's pid, then waits to be killed.
SERVICE = """
import os, subprocess, sys, time
guard = subprocess.Popen(
    [sys.executable, "-m", "launcher.head_guard", str(os.getpid()), "--", "sleep", "300"],
    start_new_session=True,
)
print(guard.pid, flush=True)
time.sleep(300)
"""


def test_a_killed_service_takes_the_guarded_group_with_it() -> None:
    service = subprocess.Popen(
        [sys.executable, "-c", SERVICE], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert service.stdout is not None
    pgid = int(service.stdout.readline())
    try:
        time.sleep(1.0)
        assert group_alive(pgid)  # the guard and `sleep 300` are running
        service.kill()  # SIGKILL: the service cannot clean up
        service.wait()
        deadline = time.monotonic() + 15
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not group_alive(pgid), "the guarded process group outlived the service"
    finally:
        service.kill()
        kill_group(pgid)


def test_the_guard_exits_with_its_command_status() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "launcher.head_guard", str(os.getpid()), "--", "sh", "-c", "exit 7"],
        cwd=REPO,
        timeout=30,
    )
    assert done.returncode == 7
    bad = subprocess.run(
        [sys.executable, "-m", "launcher.head_guard", "1"],
        cwd=REPO,
        timeout=30,
        capture_output=True,
    )
    assert bad.returncode == 2 and b"usage" in bad.stderr
