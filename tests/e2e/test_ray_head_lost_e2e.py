"""The Ray head SIGKILLed mid-job (issue 32, item 3), on a head of its own with GCS fault
tolerance (its GCS persists to a private ``redis-server`` on a free port).

The whole head goes: its process group (guard, ``ray start``, GCS, raylet, dashboard, the
driver and the training workers). The service's launcher starts its embedded head again at
the same address; the job's attempt went with the old head, so the first sweep that gets an
answer loses it with cause ``ray_head_lost`` and the job resumes from its newest verified
checkpoint as attempt 2 (or, had Ray kept it, goes on: ``survived``). Asserted: the job
succeeds, a ``ray_head_lost`` event says which, and every step's loss is there once.

Not the session head (``conftest.ray_launcher``): killing that one would take the other
tests' jobs with it. Every process started here is stopped by its process group.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ApiServer, slow_llama_spec, wait_for
from ray_nodes import stop_group

pytestmark = pytest.mark.slow

LEASE_S = 60.0  # as conftest: a busy 2-core machine never loses a healthy attempt


def _redis(port: int, log: Path) -> subprocess.Popen[bytes]:
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed (GCS fault tolerance needs a Redis)")
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--daemonize", "no"],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def pong() -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False

    try:
        wait_for(pong, timeout=30, what="redis-server to answer", interval=0.2)
    except BaseException:
        stop_group(proc)
        raise
    return proc


@pytest.fixture
def ft_launcher(tmp_path: Path) -> Iterator[Any]:
    """An embedded head whose GCS persists to a Redis of its own; both stopped at the end."""
    from launcher.ray_head import free_port
    from launcher.ray_launcher import start_embedded

    port = free_port()
    redis = _redis(port, tmp_path / "redis.log")
    root = Path(tempfile.mkdtemp(prefix="shray-ft-", dir="/tmp"))
    launcher = None
    try:
        launcher = start_embedded(
            root,
            num_cpus=3,
            extra_env={"SHUNTER_HEARTBEAT_S": "1"},
            redis_address=f"127.0.0.1:{port}",
            storage_namespace=f"e2e-{secrets.token_hex(4)}",
        )
        yield launcher
    finally:
        if launcher is not None:
            launcher.close()  # the head's process group, whichever head it is by then
        stop_group(redis)
        shutil.rmtree(root, ignore_errors=True)


def test_ray_head_killed_mid_job_resumes_or_survives(
    tmp_path: Path, data_root: Path, ft_launcher: Any
) -> None:
    api = ApiServer(
        tmp_path / "home", data_root, ft_launcher, lease_seconds=LEASE_S, max_infra_retries=2
    ).start()
    try:
        steps = 16
        job_id = api.submit(slow_llama_spec("e2e-headlost", steps=steps))
        wait_for(
            lambda: any(c["step"] >= 4 and c["verified"] for c in api.checkpoints(job_id)),
            timeout=400,
            what=f"a verified checkpoint at step >= 4 of {job_id}",
        )
        head = ft_launcher.head
        old_pid = head.process.pid
        assert api.job(job_id)["status"] == "running"
        os.killpg(old_pid, signal.SIGKILL)  # the whole head: GCS, raylet, dashboard, workers
        t_kill = time.monotonic()
        print(f"head killed at {time.strftime('%H:%M:%S', time.gmtime())} UTC")
        job = api.wait_done(job_id, timeout=600)
        print(f"head killed -> job done in {time.monotonic() - t_kill:.1f} s")
        if head.restarted_at is not None:
            print(f"head killed -> head answering again in {head.restarted_at - t_kill:.1f} s")
        print(f"Ray's word on attempt 1 at the end: {ft_launcher.status(f'{job_id}-1')}")
        events = api.events(job_id)
        said = [(e["type"], e["attempt"], e["message"]) for e in events]
        assert job["status"] == "succeeded", (job["error"], said)
        assert ft_launcher.head_restarts >= 1 and head.process.pid != old_pid
        lost = [e for e in events if e["type"] == "ray_head_lost"]
        assert len(lost) == 1, said
        what = lost[0]["message"].split(":", 1)[0]
        assert what in {"resumed", "survived"}, lost
        print(f"ray_head_lost: {lost[0]['message']}")

        points = api.metrics(job_id, "loss")
        by_attempt: dict[int, list[int]] = {}
        for p in points:
            by_attempt.setdefault(p["attempt"], []).append(p["step"])
        for n, got in by_attempt.items():  # no attempt posted a step twice
            assert len(got) == len(set(got)), (n, sorted(got))
        if what == "survived":
            assert job["attempt"] == 1
            assert sorted(by_attempt[1]) == list(range(1, steps + 1))
            return
        assert job["attempt"] == 2
        assert any(e["type"] == "attempt_lost" and "Ray head" in e["message"] for e in events)
        logs = ft_launcher.logs(f"{job_id}-2")
        resumed = re.findall(r"resumed from \S*checkpoint-(\d+) at step (\d+)", logs)
        assert resumed, logs[-3000:]
        at = int(resumed[0][1])
        assert at >= 4
        # Attempt 2 trained exactly the steps after its checkpoint; attempt 1's points cover
        # every step up to it: each step's loss is there once in the job's newest series.
        assert sorted(by_attempt[2]) == list(range(at + 1, steps + 1))
        assert set(range(1, at + 1)) <= set(by_attempt[1])
    finally:
        api.stop_jobs()
        api.stop()
