"""The repository stands alone: the README's quick start, run verbatim from a copy of the
tracked files in an empty directory (no ``../shared`` beside it), ends with a succeeded job
with loss points and a checkpoint.

Honest but fast: the copy gets no venv of its own (installing one takes many minutes); its
``.venv`` is a link to this checkout's, and ``PYTHONPATH`` puts the copy's sources first, so
the server, the CLI, the Ray driver and the workers all run the copy's code (checked below).
``make`` runs with ``-o setup`` (the venv is already set up), so ``make serve`` runs its recipe
as the README's user gets it. The commands come out of README.md, so editing the quick start
edits this test.
"""

from __future__ import annotations

import csv
import io
import os
import re
import shutil
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

REPO = Path(__file__).resolve().parents[2]
VENV = Path(sys.prefix)


def quickstart_commands(readme: str) -> list[str]:
    """The command lines of the first ``bash`` block under ``## Quick start`` (comment-only
    and blank lines dropped; trailing comments kept, bash ignores them)."""
    section = readme.split("\n## Quick start", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [ln for ln in block.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def test_readme_block_parses() -> None:
    cmds = quickstart_commands((REPO / "README.md").read_text())
    assert cmds[0].split("#")[0].strip() == "make serve"
    assert any("submit examples/" in c and "--watch" in c for c in cmds)
    assert any("JOB_ID" in c for c in cmds)


def _copy_tracked(dst: Path) -> None:
    listed = subprocess.run(
        # --others --exclude-standard: also files not yet committed (a clean CI checkout has
        # none; on a shared working tree they are the rest of someone's change).
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():  # a file deleted in the working tree is not in a clone either
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst / rel)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _env(clone: Path, port: int) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SHUNTER_", "RAY_", "PYTEST_")) and k != "PYTHONPATH"
    }
    env.update(
        PYTHONPATH=str(clone),
        SHUNTER_PORT=str(port),
        SHUNTER_URL=f"http://127.0.0.1:{port}",
        HF_HUB_OFFLINE="1",
    )
    return env


def _wait_healthy(serve: subprocess.Popen[bytes], port: int, log: Path) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if serve.poll() is not None:
            pytest.fail(f"make serve exited early:\n{log.read_text()[-4000:]}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"make serve did not answer /healthz in 300 s:\n{log.read_text()[-4000:]}")


def _stop(serve: subprocess.Popen[bytes], guards: list[int]) -> None:
    if serve.poll() is None:
        os.killpg(serve.pid, signal.SIGINT)  # Ctrl-C, as the README's user stops it
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            kill_group(serve.pid)
            serve.wait()
    for pgid in guards:  # the embedded Ray head's group; serve stops it, this is a backstop
        deadline = time.monotonic() + 30
        while group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(0.5)
        kill_group(pgid)


def test_quickstart_from_a_lone_copy(tmp_path: Path) -> None:
    clone = tmp_path / "shunter"
    clone.mkdir()
    _copy_tracked(clone)
    (clone / ".venv").symlink_to(VENV)
    assert not (clone / ".." / "shared").exists()
    port = _free_port()
    env = _env(clone, port)
    where = subprocess.run(
        [str(clone / ".venv/bin/python"), "-c", "import service, worker; print(service.__file__)"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert where.startswith(str(clone)), f"the copy's sources are not first: {where}"

    cmds = quickstart_commands((clone / "README.md").read_text())
    assert cmds[0].split("#")[0].strip() == "make serve"
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(
            ["make", "-o", "setup", "serve"],
            cwd=clone,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    guards: list[int] = []
    try:
        started = time.monotonic()
        _wait_healthy(serve, port, log)
        print(f"make serve healthy after {time.monotonic() - started:.1f} s")
        guards = [
            p.pid
            for p in psutil.Process(serve.pid).children(recursive=True)
            if "launcher.head_guard" in " ".join(p.cmdline())
        ]
        outputs: dict[str, str] = {}
        job_id = None
        for cmd in cmds[1:]:
            if "JOB_ID" in cmd:
                assert job_id is not None, f"{cmd!r} comes before any submit"
                cmd = cmd.replace("JOB_ID", job_id)
            run = subprocess.run(
                ["bash", "-c", cmd], cwd=clone, env=env, capture_output=True, text=True, timeout=600
            )
            assert run.returncode == 0, f"{cmd!r} -> {run.returncode}\n{run.stdout}\n{run.stderr}"
            print(f"{time.monotonic() - started:.1f} s: {cmd.split('#')[0].strip()}")
            outputs[cmd.split()[1]] = run.stdout
            if job_id is None and (m := re.search(r"submitted (\S+)", run.stdout)):
                job_id = m.group(1)
        assert job_id is not None, "no command of the quick start submitted a job"

        token = (clone / ".shunter" / "admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        base = f"http://127.0.0.1:{port}/v1/jobs/{job_id}"
        job = httpx.get(base, headers=headers, timeout=10).json()
        assert job["status"] == "succeeded", job
        rows = list(csv.DictReader(io.StringIO(outputs["metrics"])))
        losses = [float(r["value"]) for r in rows if r.get("name", "loss") == "loss"]
        assert len(losses) >= 3, outputs["metrics"]
        assert all(v == v and v > 0 for v in losses)
        checkpoints = httpx.get(f"{base}/checkpoints", headers=headers, timeout=10).json()
        items = checkpoints["data"]
        assert any(c["verified"] for c in items), f"no verified checkpoint: {items}"
        assert str(items[-1]["step"]) in outputs["checkpoints"]
        final = Path(job["final_model_uri"].removeprefix("file://"))
        assert final.is_relative_to(clone) and (final / "config.json").is_file(), final
        if "tensorboard" in job["spec"]["training"].get("report_to", []):
            _assert_events_match_api(final.parent / "tensorboard", base, headers)
    finally:
        _stop(serve, guards)


def _assert_events_match_api(logdir: Path, base: str, headers: dict[str, str]) -> None:
    """report_to: [tensorboard] left event files whose loss points are the API's (float32)."""
    import numpy as np
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    page = httpx.get(f"{base}/metrics", params={"name": "loss"}, headers=headers, timeout=10)
    api = {p["step"]: p["value"] for p in page.json()["data"]}
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    events = {e.step: e.value for e in acc.Scalars("loss")}
    assert api and events == {step: float(np.float32(v)) for step, v in api.items()}
