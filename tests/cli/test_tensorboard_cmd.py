"""``shunter tensorboard JOB...``: TensorBoard over several jobs' event files in the server's
storage, each job a run; a job without events is a clear error."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _write_events(logdir: Path, losses: list[float]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(logdir)) as writer:
        for step, loss in enumerate(losses, start=1):
            writer.add_scalar("loss", loss, global_step=step)


def _env(storage: Path) -> dict[str, str]:
    return {**os.environ, "SHUNTER_STORAGE": str(storage), "SHUNTER_HOME": str(storage.parent)}


def test_job_without_events_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "storage" / "job-a").mkdir(parents=True)
    run = subprocess.run(
        [str(BIN / "shunter"), "tensorboard", "job-a"],
        env=_env(tmp_path / "storage"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "job-a: no TensorBoard events" in run.stderr and "report_to" in run.stderr


@pytest.mark.slow
def test_serves_several_jobs_as_runs(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    storage = tmp_path / "storage"
    _write_events(storage / "job-a" / "tensorboard", [2.0, 1.5])
    _write_events(storage / "job-b" / "tensorboard", [3.0, 2.5, 2.0])
    port = _free_port()
    proc = subprocess.Popen(
        [str(BIN / "shunter"), "tensorboard", "job-a", "job-b", "--port", str(port)],
        env=_env(storage),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        runs: dict[str, object] = {}
        while time.monotonic() < deadline and len(runs) < 2:
            assert proc.poll() is None, "shunter tensorboard exited"
            with contextlib.suppress(httpx.HTTPError, ValueError):
                runs = httpx.get(f"http://127.0.0.1:{port}/data/plugin/scalars/tags").json()
            time.sleep(0.5)
        # TensorBoard names a run by its spec name and the folder below it ("." = itself).
        assert set(runs) == {"job-a/.", "job-b/."}
        got = httpx.get(
            f"http://127.0.0.1:{port}/data/plugin/scalars/scalars",
            params={"run": "job-b/.", "tag": "loss"},
        ).json()
        assert [(step, value) for _, step, value in got] == [(1, 3.0), (2, 2.5), (3, 2.0)]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
