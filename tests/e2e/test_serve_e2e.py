"""``shunter serve`` as a newcomer runs it: embedded SQLite and its own Ray head. A service
killed with SIGKILL (no chance to clean up) still takes its Ray head down with it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest

from tests.procs import group_alive, kill_group

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_sigkilled_service_leaves_no_ray_head_behind(tmp_path: Path) -> None:
    port = _free_port()
    env = {**os.environ, "SHUNTER_HOME": str(tmp_path / "home")}
    env.pop("SHUNTER_RAY_ADDRESS", None)
    env.pop("SHUNTER_DATABASE_URL", None)
    serve = subprocess.Popen(
        [str(BIN / "shunter"), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    guards: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            assert serve.poll() is None, "shunter serve exited early"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail("shunter serve did not answer /healthz in 300 s")
        guards = [
            p
            for p in psutil.Process(serve.pid).children()
            if "launcher.head_guard" in " ".join(p.cmdline())
        ]
        assert len(guards) == 1, "the embedded Ray head was not started under its guard"
        pgid = guards[0].pid
        head = [p for p in psutil.process_iter(["pid"]) if _pgid(p.pid) == pgid]
        assert len(head) >= 3  # guard, `ray start`, GCS, raylet, dashboard, ...
        serve.send_signal(signal.SIGKILL)
        serve.wait()
        deadline = time.monotonic() + 30
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not group_alive(pgid), "the Ray head outlived the killed service"
    finally:
        serve.kill()
        for g in guards:
            kill_group(g.pid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
