"""``shunter serve --workers N`` starts ONE head and ONE scheduler, in the parent; the N API
workers join that head (on main 187a972 each worker started its own Ray head). Slow: a real
server with two uvicorn workers (a head-counting in-memory launcher, no Ray)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_serve_workers_starts_one_head_that_every_worker_joins(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "launches.log"
    env = {
        **os.environ,
        "SHUNTER_HOME": str(tmp_path / "home"),
        "SHUNTER_LAUNCHER": "head_counting_launcher:from_settings",
        "SHUNTER_TEST_LAUNCH_LOG": str(log),
        "PYTHONPATH": f"{REPO / 'tests' / 'security'}:{REPO}",
    }
    env.pop("SHUNTER_RAY_ADDRESS", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "shunter.cli", "serve", "--port", str(port), "--workers", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while True:
            lines = log.read_text().splitlines() if log.exists() else []
            if len(lines) >= 3:
                break
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, lines
            time.sleep(0.5)
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        kinds = sorted(line.split(" ", 1)[1] for line in log.read_text().splitlines())
        assert kinds == ["join http://127.0.0.1:1", "join http://127.0.0.1:1", "start-head"]
        pids = {line.split(" ", 1)[0] for line in log.read_text().splitlines()}
        assert len(pids) == 3  # the parent and two distinct workers
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
