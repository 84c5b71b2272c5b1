"""Submit does not wait on Ray (issue #22): admission checks against the cluster as the
scheduler's last tick read it (``scheduler.cluster_view``), so with Ray's dashboard down a
submit still answers 201 and the job waits with a reason; nothing answers 500."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from svc_helpers import bearer, submit, tiny_spec

from service.launch import ClusterResources, InMemoryLauncher
from service.scheduler.cluster_view import ClusterView
from service.scheduler.loop import Scheduler


def _closed_port() -> int:
    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(kw_only=True)
class DashboardDown(InMemoryLauncher):
    """The in-memory launcher whose ``cluster()`` reads a Ray dashboard at a closed port, as
    the real one does when Ray is down (``httpx.ConnectError``)."""

    port: int = 0

    def cluster(self) -> ClusterResources:
        httpx.get(f"http://127.0.0.1:{self.port}/api/v0/nodes", timeout=2).raise_for_status()
        raise AssertionError("a closed port answered")


@dataclass(kw_only=True)
class Counting(InMemoryLauncher):
    calls: int = 0

    def cluster(self) -> ClusterResources:
        self.calls += 1
        return super().cluster()


class TestDashboardDown:
    @pytest.fixture
    def launcher(self) -> Any:
        return DashboardDown(port=_closed_port())

    def test_submit_is_201_and_the_job_waits_with_a_reason(
        self, client: Any, admin_token: str, db: Any, settings: Any, app: Any
    ) -> None:
        h = bearer(admin_token)
        dry = client.post("/v1/jobs?dry_run=true", json=tiny_spec(), headers=h)
        assert dry.status_code == 200, dry.text
        job_id = submit(client, admin_token)["id"]  # asserts 201
        sched = Scheduler(settings, db, app.state.shunter.launcher)
        report = sched.tick()
        assert report.started == [] and any("cluster" in e for e in report.errors)
        job = client.get(f"/v1/jobs/{job_id}", headers=h).json()
        assert job["status"] == "queued"
        assert "cluster (Ray) is unreachable" in job["pending_reason"]
        assert "ConnectError" in job["pending_reason"]
        # The cluster page says so too, as a 503 (never a 500).
        r = client.get("/v1/cluster", headers=h)
        assert r.status_code == 503 and "unreachable" in r.json()["message"]


class TestSubmitReadsTheTicksView:
    @pytest.fixture
    def launcher(self) -> Any:
        return Counting()

    def test_submits_between_ticks_do_not_call_the_launcher(
        self, client: Any, admin_token: str, db: Any, settings: Any, app: Any, launcher: Any
    ) -> None:
        sched = Scheduler(settings, db, launcher, cluster_view=app.state.shunter.clusters())
        sched.tick()
        before = launcher.calls
        for _ in range(3):
            submit(client, admin_token)
        r = client.post("/v1/jobs?dry_run=true", json=tiny_spec(), headers=bearer(admin_token))
        assert r.status_code == 200
        assert launcher.calls == before  # the tick's view, no read of its own
        # The capacity check still runs against that view: 3 x 8 CPUs > the node's 8.
        big = tiny_spec()
        big["resources"] = {"num_workers": 3, "cpus_per_worker": 8, "gpus_per_worker": 0}
        r = client.post("/v1/jobs", json=big, headers=bearer(admin_token))
        assert r.status_code == 422 and "resources" in r.text


def test_the_view_rereads_only_when_stale_and_keeps_the_last_good_one() -> None:
    now = [0.0]
    launcher = Counting()
    view = ClusterView(launcher, max_age_s=5.0, clock=lambda: now[0])
    assert view.seen().cluster is not None and launcher.calls == 1
    now[0] = 4.0
    seen = view.seen()
    assert launcher.calls == 1 and seen.age_s == 4.0
    now[0] = 6.0
    view.seen()
    assert launcher.calls == 2
    launcher.cluster = lambda: (_ for _ in ()).throw(RuntimeError("down"))  # type: ignore[method-assign]
    now[0] = 12.0
    seen = view.seen()
    assert seen.cluster is not None and seen.age_s == 6.0 and "down" in (seen.error or "")


@dataclass(kw_only=True)
class GoesDown(InMemoryLauncher):
    down: bool = False

    def cluster(self) -> ClusterResources:
        if self.down:
            raise httpx.ConnectError("connection refused")
        return super().cluster()


class TestRayWentDown:
    @pytest.fixture
    def launcher(self) -> Any:
        return GoesDown()

    def test_a_capacity_error_says_the_view_is_old(
        self, client: Any, admin_token: str, db: Any, settings: Any, app: Any, launcher: Any
    ) -> None:
        sched = Scheduler(settings, db, launcher, cluster_view=app.state.shunter.clusters())
        sched.tick()  # a good read
        launcher.down = True
        sched.tick()  # a failed one: the view keeps the good read and the failure
        submit(client, admin_token)  # still 201 against the kept view
        big = tiny_spec()
        big["resources"] = {"num_workers": 3, "cpus_per_worker": 8, "gpus_per_worker": 0}
        r = client.post("/v1/jobs", json=big, headers=bearer(admin_token))
        assert r.status_code == 422, r.text
        assert "(the cluster as last read " in r.text and " s ago; reading it now fails)" in r.text
