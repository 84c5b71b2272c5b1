"""The network-cut bar of issue 32 on a real local Ray: a running 2-worker job's path to the
API (the driver's, the Train controller's and the workers' calls all go to ``public_url``,
here a TCP proxy in front of the server: ``tests/stall_proxy.py``) is black-holed for 60 s
after its first checkpoint reached the API. The job succeeds as attempt 1, every step's loss
point arrives exactly once, every checkpoint is registered, and no ``hung`` event is raised
(its hang bound is 20 s, its lease 20 s: both shorter than the cut).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ApiServer, tiny_llama_spec, wait_for

from tests.stall_proxy import StallProxy

pytestmark = pytest.mark.slow

CUT_S = 60.0
STEPS = 400
SAVE_STEPS = 100


@pytest.fixture
def cut_api(tmp_path: Path, data_root: Path, ray_launcher: Any) -> Iterator[tuple[ApiServer, Any]]:
    """The e2e server, reached by the job only through a proxy the test can cut."""
    server = ApiServer(
        tmp_path / "home",
        data_root,
        ray_launcher,
        lease_seconds=20.0,
        max_infra_retries=2,
        health_hang_factor_min=1.0,
        health_hang_floor_min_s=1.0,
    )
    proxy = StallProxy(server.port).start()
    server._settings["public_url"] = proxy.url
    server.start()
    try:
        yield server, proxy
    finally:
        proxy.restore()
        server.stop_jobs()
        server.stop()
        proxy.close()


def test_a_minute_cut_between_the_workers_and_the_api(cut_api: tuple[ApiServer, Any]) -> None:
    api, proxy = cut_api
    health = {"hang": {"factor": 3.0, "floor_s": 20.0, "startup_s": 300}}
    spec = tiny_llama_spec("e2e-cut", steps=STEPS, health=health)
    spec["training"]["save_steps"] = SAVE_STEPS
    job_id = api.submit(spec)
    wait_for(lambda: api.checkpoints(job_id), timeout=300, what="the first checkpoint",
             interval=0.2)  # fmt: skip
    proxy.cut()
    cut_at = time.monotonic()
    step_at_cut = int(api.job(job_id).get("progress", {}).get("step") or 0)
    try:
        while time.monotonic() - cut_at < CUT_S:
            job = api.job(job_id)  # users still read the job meanwhile
            assert job["status"] == "running" and job["attempt"] == 1, job
            time.sleep(2)
    finally:
        proxy.restore()
    job = api.wait_done(job_id, timeout=600)
    assert job["status"] == "succeeded", job
    assert job["attempt"] == 1, job
    events = api.events(job_id)
    assert not [e for e in events if e["type"] in ("hung", "attempt_lost")], events
    losses = Counter(p["step"] for p in api.metrics(job_id, "loss"))
    assert sorted(losses) == list(range(1, STEPS + 1)), sorted(
        set(range(1, STEPS + 1)) - set(losses)
    )
    assert set(losses.values()) == {1}
    ckpts = api.checkpoints(job_id)  # the newest ones kept by save_total_limit, if any
    assert ckpts and max(c["step"] for c in ckpts) == STEPS, ckpts
    assert all(c["attempt"] == 1 and c["verified"] for c in ckpts), ckpts
    print(f"\nnetwork cut e2e: cut {CUT_S:.0f} s at step {step_at_cut}; succeeded as attempt 1")
