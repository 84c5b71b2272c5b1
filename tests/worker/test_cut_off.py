"""A worker cut off from the API (issue 32 item 4), at the service level: the worker's own
clients (``InternalApi`` under ``MetricsSender``, the ``PostOutbox`` that carries checkpoint
registrations, the driver's ``Heartbeat``) talk to a real server (uvicorn, the in-memory
launcher, the scheduler and its hang watch running) through a TCP proxy that the test cuts
(a black hole: nothing answers, nothing is refused) for longer than the attempt's lease and
the job's hang bound, while "training" goes on stepping. Then the path is restored:

- every metric point and checkpoint registration made during the cut lands, once, in order;
- the attempt is neither lost (its lease expired, but Ray runs it: ``lease_grace_s``) nor
  called hung (its heartbeats were missing too: ``service.health.hang``), and no second
  attempt is placed.

No Ray: the job's driver is played by these clients.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from service.launch import LaunchState, LaunchStatus
from tests.client.live_server import live_server, valid_spec
from tests.stall_proxy import StallProxy
from worker.driver import Heartbeat
from worker.internal_api import InternalApi, MetricsSender, RetryPolicy
from worker.outbox import PostOutbox

LEASE_S = 3.0
STEP_S = 0.25  # one training step, as the worker reports it
CUT_S = 8.0  # past the lease (3 s) and the hang bound (factor 3 x 0.25 s < floor 2 s)


def _step(sender: MetricsSender, step: int) -> None:
    sender.put(step, {"loss": 1.0 / step, "step_time_s": STEP_S}, {"step": step})


def test_a_worker_cut_off_from_the_api_trains_on_and_its_posts_land_once(tmp_path: Path) -> None:
    spec = {**valid_spec(), "health": {"hang": {"factor": 3, "floor_s": 2}}}
    with live_server(
        tmp_path,
        lease_seconds=LEASE_S,
        lease_grace_s=600,
        health_hang_floor_min_s=1,
        health_hang_factor_min=1,
    ) as srv:
        admin = {"Authorization": f"Bearer {srv.admin_token}"}
        http = httpx.Client(base_url=srv.url, timeout=30)
        r = http.post("/v1/jobs", json=spec, headers=admin)
        assert r.status_code in (200, 201, 202), r.text
        job_id = r.json()["id"]
        req = srv.launched(job_id)
        srv.launcher.states[req.submission_id] = LaunchStatus(state=LaunchState.RUNNING)
        proxy = StallProxy(int(srv.url.rsplit(":", 1)[1])).start()
        api = InternalApi(
            api_url=proxy.url,
            token=req.attempt_token,
            job_id=job_id,
            attempt=req.attempt,
            retry=RetryPolicy(attempts=3, base_s=0.1, max_s=0.5),
            timeout_s=1.0,
        )
        api.status("running")
        stops: list[str] = []
        beat = Heartbeat(api, interval_s=0.3, on_stop=stops.append)
        beat.start()
        sender = MetricsSender(api, interval_s=0.2)
        outbox = PostOutbox(api, path=tmp_path / "outbox.jsonl", base_s=0.2, max_s=1.0)
        out = api.spec()["output_dir"]

        def checkpoint(step: int) -> None:
            body = {"step": step, "uri": f"{out}/checkpoint-{step}", "bytes": 1, "verified": True}
            assert outbox.put("checkpoints", body)

        try:
            for step in range(1, 6):
                _step(sender, step)
                time.sleep(STEP_S)
            checkpoint(5)
            assert sender.flush(30) and outbox.flush(30)

            proxy.cut()
            cut_at, step = time.monotonic(), 5
            while time.monotonic() - cut_at < CUT_S:  # training goes on
                step += 1
                _step(sender, step)
                if step % 10 == 0:
                    checkpoint(step)
                time.sleep(STEP_S)
            assert sender.pending() > 0 and outbox.pending() > 0  # held, not lost
            assert (tmp_path / "outbox.jsonl").exists()  # the registrations are on disk
            # Meanwhile, on the service's side: not lost, not hung, not placed again.
            job = http.get(f"/v1/jobs/{job_id}", headers=admin).json()
            assert job["status"] == "running" and job["attempt"] == 1, job

            proxy.restore()
            last = step
            back_at = time.monotonic()
            # Training goes on (a job that stopped stepping now would rightly be hung) while
            # the scheduler and its hang watch tick on the replayed posts.
            while time.monotonic() - back_at < 3 * LEASE_S:
                step += 1
                _step(sender, step)
                time.sleep(STEP_S)
            assert sender.flush(60), "metrics not delivered after the return"
            assert outbox.flush(60), "checkpoint registrations not delivered after the return"
            assert not (tmp_path / "outbox.jsonl").exists()
            assert sender.dropped == 0 and outbox.dropped == 0
        finally:
            beat.stop()
            sender.close(5)
            outbox.close(5)
            api.close()
            proxy.close()
        assert stops == []
        job = http.get(f"/v1/jobs/{job_id}", headers=admin).json()
        assert job["status"] == "running" and job["attempt"] == 1, job
        assert f"{job_id}-2" not in srv.launcher.submitted
        events = http.get(f"/v1/jobs/{job_id}/events", headers=admin).json()["data"]
        assert not [e for e in events if e["type"] in ("hung", "attempt_lost")], events
        points = http.get(
            f"/v1/jobs/{job_id}/metrics", params={"limit": 1000, "name": "loss"}, headers=admin
        ).json()["data"]
        assert sorted(p["step"] for p in points) == list(range(1, step + 1))  # each once
        ckpts = http.get(f"/v1/jobs/{job_id}/checkpoints", headers=admin).json()["data"]
        want = [5, *range(10, last + 1, 10)]
        assert sorted(c["step"] for c in ckpts) == want, ckpts
        http.close()
