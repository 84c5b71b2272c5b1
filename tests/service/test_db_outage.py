"""The database away (issue 32 item 1), against a private PostgreSQL this test starts with
``pg_ctl`` on a free port (``tests/pg_cluster.py``), restarts, and keeps down past the
attempts' lease:

- every API call meanwhile is 2xx or 503 with ``Retry-After``: never a 500, never a hang
  (a prober calls the public and internal routes throughout, each with a bounded timeout);
- ``GET`` works again by itself after the database returns (eventually, within 10 s);
- the scheduler pauses and goes on: the running attempt is not lost (its lease expired while
  no heartbeat could land, but Ray still runs it: ``lease_grace_s``), no second attempt is
  placed, and a job submitted after the return is placed exactly once;
- the driver's re-sent metric batches (buffered while the API answered 503) land once.

A real server (uvicorn, the in-memory launcher) on its own thread; no Ray.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from service.db.migrate import upgrade
from service.launch import LaunchState, LaunchStatus
from tests.client.live_server import LiveServer, live_server, valid_spec
from tests.pg_cluster import PgCluster, available

LEASE_S = 3.0  # short, so that the outage outlasts it
DOWN_S = LEASE_S + 4  # the database stays down past every attempt's lease


@pytest.fixture
def pg() -> Iterator[PgCluster]:
    cluster = PgCluster.create()
    try:
        cluster.start()
        upgrade(cluster.url)
        yield cluster
    finally:
        cluster.destroy()


class Prober:
    """Calls a mix of routes in a loop on its own thread and records every outcome."""

    def __init__(self, srv: LiveServer, job_id: str) -> None:
        self.outcomes: list[tuple[str, int | str, str | None]] = []
        self._stop = threading.Event()
        self._srv, self._job = srv, job_id
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _calls(self) -> list[tuple[str, str, dict[str, Any]]]:
        admin = {"Authorization": f"Bearer {self._srv.admin_token}"}
        return [
            ("GET", f"/v1/jobs/{self._job}", {"headers": admin}),  # the poll fast path
            ("GET", "/v1/jobs", {"headers": admin}),
            ("GET", f"/v1/jobs/{self._job}/metrics", {"headers": admin}),
            ("GET", "/healthz", {}),
            # No internal route: each one renews the attempt's lease (see the test).
        ]

    def _run(self) -> None:
        # Bounded: a call that takes longer than this is a hang, recorded as such.
        with httpx.Client(base_url=self._srv.url, timeout=30) as http:
            while not self._stop.is_set():
                for method, path, kw in self._calls():
                    try:
                        r = http.request(method, path, **kw)
                        self.outcomes.append((path, r.status_code, r.headers.get("retry-after")))
                    except httpx.HTTPError as e:
                        self.outcomes.append((path, f"{type(e).__name__}: {e}", None))
                time.sleep(0.05)

    def start(self) -> Prober:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)

    def count(self, status: int) -> int:
        return sum(1 for o in list(self.outcomes) if o[1] == status)


def _eventually_ok(
    http: httpx.Client, path: str, headers: dict[str, str], within_s: float
) -> float:
    """Seconds until ``GET path`` answers 200 (fails after ``within_s``)."""
    t0 = time.monotonic()
    while True:
        r = http.get(path, headers=headers)
        if r.status_code == 200:
            return time.monotonic() - t0
        assert r.status_code == 503, (r.status_code, r.text)
        assert time.monotonic() - t0 < within_s, f"{path} still {r.status_code} after {within_s} s"
        time.sleep(0.1)


def _ticks(http: httpx.Client) -> float:
    for line in http.get("/metrics").text.splitlines():
        if line.startswith("shunter_scheduler_ticks_total "):
            return float(line.split()[1])
    raise AssertionError("no shunter_scheduler_ticks_total in /metrics")


def _points(step: int) -> list[dict[str, Any]]:
    return [{"step": step, "name": "loss", "value": 1.0 / step}]


@pytest.mark.skipif(available() is not None, reason=str(available()))
def test_database_restart_and_outage(pg: PgCluster, tmp_path: Path) -> None:
    with live_server(
        tmp_path, database_url=pg.url, lease_seconds=LEASE_S, lease_grace_s=600
    ) as srv:
        admin = {"Authorization": f"Bearer {srv.admin_token}"}
        http = httpx.Client(base_url=srv.url, timeout=30)
        r = http.post("/v1/jobs", json=valid_spec(), headers=admin)
        assert r.status_code in (200, 201, 202), r.text
        job_id = r.json()["id"]
        req = srv.launched(job_id)
        srv.launcher.states[req.submission_id] = LaunchStatus(state=LaunchState.RUNNING)
        driver = srv.driver(job_id)
        driver.status("running")
        internal = f"/v1/internal/jobs/{job_id}/attempts/1"
        metrics = f"{internal}/metrics"
        beat = {"Authorization": f"Bearer {req.attempt_token}"}
        for step in (1, 2, 3):
            assert http.post(metrics, json={"points": _points(step)}, headers=beat).is_success
        prober = Prober(srv, job_id).start()
        try:
            # 1. A restart (a minor upgrade): pooled connections die; requests recover.
            pg.restart()
            restart_s = _eventually_ok(http, f"/v1/jobs/{job_id}", admin, within_s=10)

            # 2. Down past the lease. The driver's batches get 503 and are kept to re-send.
            pg.stop()
            buffered = []
            down_at = time.monotonic()
            while time.monotonic() - down_at < DOWN_S:
                step = 4 + len(buffered)
                r = http.post(metrics, json={"points": _points(step)}, headers=beat)
                assert r.status_code == 503 and r.headers.get("retry-after"), r.text
                assert r.json()["detail"] == "database_unavailable"
                buffered.append(step)
                time.sleep(0.5)
            r = http.post("/v1/jobs", json=valid_spec(), headers=admin)  # a submit: 503 too
            assert r.status_code == 503 and r.headers.get("retry-after"), r.text
            pg.start()
            back_s = _eventually_ok(http, f"/v1/jobs/{job_id}", admin, within_s=10)
            _eventually_ok(http, "/v1/jobs", admin, within_s=10)
            # No heartbeat has landed since before the outage: the lease expired long ago.
            # Let the scheduler (paused, backing off) tick a few times on the database that
            # is back before the driver's next beat: Ray still runs the attempt, so it is held.
            ticks = _ticks(http)
            deadline = time.monotonic() + 60
            while _ticks(http) < ticks + 3:
                assert time.monotonic() < deadline, "the scheduler did not resume"
                time.sleep(0.2)
            job = http.get(f"/v1/jobs/{job_id}", headers=admin).json()
            assert job["status"] == "running" and job["attempt"] == 1, job
            assert http.post(f"{internal}/heartbeat", json={}, headers=beat).is_success

            # The driver re-sends everything it holds, some of it twice: each lands once.
            for step in [2, 3, *buffered, *buffered]:
                r = http.post(metrics, json={"points": _points(step)}, headers=beat)
                assert r.is_success, r.text
            # The scheduler goes on: a new job is placed, exactly once.
            r = http.post("/v1/jobs", json=valid_spec(), headers=admin)
            assert r.status_code in (200, 201, 202), r.text
            srv.launched(r.json()["id"])
        finally:
            prober.stop()
        outcomes = list(prober.outcomes)
        bad = [o for o in outcomes if not (isinstance(o[1], int) and (o[1] < 300 or o[1] == 503))]
        assert not bad, bad[:10]  # no 500, no hang, no connection error
        assert prober.count(503) > 0, "the prober never saw the database away"
        assert all(o[2] for o in outcomes if o[1] == 503), "a 503 without Retry-After"

        # The attempt outlived its lease: not lost, and nothing placed twice.
        job = http.get(f"/v1/jobs/{job_id}", headers=admin).json()
        assert job["status"] == "running" and job["attempt"] == 1, job
        assert f"{job_id}-2" not in srv.launcher.submitted
        assert srv.launcher.status(req.submission_id).state == LaunchState.RUNNING
        page = http.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 500}, headers=admin)
        steps = [p["step"] for p in page.json()["data"] if p["name"] == "loss"]
        assert sorted(steps) == [1, 2, 3, *buffered], steps  # every point exactly once
        driver.status("succeeded")
        assert http.get(f"/v1/jobs/{job_id}", headers=admin).json()["status"] == "succeeded"
        http.close()
        driver.close()
        print(
            f"\ndb outage: GET back {restart_s:.2f} s after a restart, {back_s:.2f} s after "
            f"{DOWN_S:.0f} s down; {prober.count(503)} of {len(outcomes)} probe calls were 503"
        )


def test_an_unreachable_database_is_unavailable_not_a_hang() -> None:
    """A server that accepts the connection and then says nothing (a blackholed route, a
    hung host): the connect timeout ends the wait, and the error reads as "unavailable"
    (503 at the edge), not as a bug (500)."""
    from service.db.engine import Database, is_unavailable

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes handshakes; nothing ever answers
    port = silent.getsockname()[1]
    db = Database(f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres", pool_size=1)
    got: list[BaseException] = []

    def read() -> None:
        try:
            db.read(lambda s: s.execute(text("SELECT 1")).scalar())
        except Exception as e:
            got.append(e)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(120)  # a bound far above the connect timeout: only a hang reaches it
    try:
        assert not thread.is_alive(), "the read hung on a silent server"
        assert got and is_unavailable(got[0]), got
    finally:
        db.dispose()
        silent.close()


def _wrapped(orig: Exception) -> Exception:
    return DBAPIError.instance("SELECT 1", None, orig, Exception)


@pytest.mark.parametrize(
    ("make", "want"),
    [
        (lambda: _wrapped(psycopg.OperationalError("connection refused")), True),
        (lambda: _wrapped(psycopg.errors.AdminShutdown("shutting down")), True),
        (lambda: _wrapped(psycopg.errors.CannotConnectNow("starting up")), True),
        (lambda: _wrapped(psycopg.errors.QueryCanceled("statement timeout")), True),
        (lambda: _wrapped(psycopg.errors.UndefinedTable("no such table")), False),
        (lambda: _wrapped(psycopg.errors.UniqueViolation("duplicate")), False),
        (lambda: _wrapped(sqlite3.OperationalError("database is locked")), True),
        (lambda: _wrapped(sqlite3.OperationalError("no such table: jobs")), False),
        (lambda: PoolTimeout("QueuePool limit"), True),
        (lambda: ValueError("not the database"), False),
    ],
)
def test_what_reads_as_the_database_away(make: Any, want: bool) -> None:
    """503 for the database away or overloaded; a bug in a statement stays a 500."""
    from service.db.engine import is_unavailable

    assert is_unavailable(make()) is want
