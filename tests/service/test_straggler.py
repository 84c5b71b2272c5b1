"""The straggler watch (issue 23 item 3): the rules on synthetic per-rank timings (tables),
then through the metrics path on SQLite and PostgreSQL: a slow rank is a ``straggler`` event
naming its rank and node, once per window even when the batch is retried; a throughput drop
below half the job's own median is a ``throughput_dropped`` event when it begins; a node
flagged N times is cordoned (admin API, CLI model, Prometheus), and placement leaves a
cordoned node out until the cordon expires."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update
from svc_helpers import bearer, claim, internal, submit, tiny_spec

from service.db.tables import NodeCordon
from service.health.straggler import cordoned_nodes
from service.health.straggler_rule import (
    complete,
    cordon_due,
    rank_times,
    stragglers,
    throughput_drop,
)
from service.launch import InMemoryLauncher, LaunchState, LaunchStatus, NodeResources
from service.policy import capacity
from service.scheduler.cluster_view import without_cordoned
from service.scheduler.loop import Scheduler
from shunter.client.responses import NodeCordon as NodeCordonModel
from shunter.jobspec import JobSpec
from worker.driver import avoid_nodes_selector

# -- the rules --------------------------------------------------------------------------


def _window(*compute: float, wait: float = 0.01) -> dict[str, float]:
    out = {"window/ranks": float(len(compute))}
    for rank, c in enumerate(compute):
        out[f"rank/{rank}/compute_s"] = c
        out[f"rank/{rank}/wait_s"] = wait
    return out


@pytest.mark.parametrize(
    ("compute", "factor", "want"),
    [
        ((0.10, 0.10, 0.10, 0.10), 1.5, []),  # an even gang
        ((0.10, 0.11, 0.10, 0.14), 1.5, []),  # 1.4x the median: noise, not a straggler
        ((0.10, 0.10, 0.10, 0.16), 1.5, [3]),  # 1.6x the median
        ((0.25, 0.10, 0.10, 0.10, 0.30), 1.5, [4, 0]),  # slowest first
        ((0.10, 0.10, 0.10, 0.16), 2.0, []),  # the job's own factor
        ((0.10, 0.35), 1.5, [1]),  # two ranks: median 0.225, 0.35 > 0.3375
        ((0.10, 0.30), 1.5, []),  # two ranks: 0.30 < 1.5 x 0.20
        ((0.50,), 1.5, []),  # one rank: no gang to compare with
    ],
)
def test_stragglers(compute: tuple[float, ...], factor: float, want: list[int]) -> None:
    got = stragglers(rank_times(_window(*compute)), factor=factor)
    assert [s.rank for s in got] == want
    for s in got:
        assert s.ratio > factor and s.wait_s == 0.01


def test_a_window_is_complete_when_every_rank_arrived() -> None:
    full = _window(0.1, 0.1, 0.3)
    assert complete(full)
    assert not complete({k: v for k, v in full.items() if k != "rank/2/compute_s"})
    assert not complete({k: v for k, v in full.items() if k != "window/ranks"})


def test_rank_times_reads_only_rank_metrics() -> None:
    points = {"loss": 1.0, "rank/2/compute_s": 0.5, "rank/2/wait_s": 0.1, "rank/x/compute_s": 9}
    assert rank_times(points) == {2: {"compute_s": 0.5, "wait_s": 0.1}}


@pytest.mark.parametrize(
    ("current", "earlier", "drop"),
    [
        (4.0, [10.0, 10.0], False),  # fewer than 3 earlier windows: no median yet
        (4.0, [10.0, 10.0, 10.0], True),  # 4 < 0.5 x 10
        (5.0, [10.0, 10.0, 10.0], False),  # exactly half: not below
        (4.0, [10.0, 10.0, 10.0, 3.0], False),  # already dropped last window: no repeat
        (4.0, [10.0, 10.0, 10.0, 3.0, 9.0], True),  # recovered, then a new drop
        (4.0, [9.0, 11.0, 2.0, 10.0], True),  # the median, not the mean
    ],
)
def test_throughput_drop(current: float, earlier: list[float], drop: bool) -> None:
    got = throughput_drop(current, earlier, metric="window/samples_per_s", drop=0.5)
    assert (got is not None) is drop


def test_cordon_due() -> None:
    assert not cordon_due(5, after=0)  # 0: never
    assert not cordon_due(1, after=2)
    assert cordon_due(2, after=2)


def test_spec_fields_are_validated() -> None:
    ok = JobSpec.model_validate({**tiny_spec(), "health": {"straggler": {"factor": 2}}})
    assert ok.health.straggler.factor == 2 and ok.health.straggler.window_steps == 50
    for bad in ({"factor": 1.0}, {"throughput_drop": 1.0}, {"window_steps": 0}):
        with pytest.raises(ValueError, match="straggler"):
            JobSpec.model_validate({**tiny_spec(), "health": {"straggler": bad}})


# -- through the metrics path -------------------------------------------------------------


@pytest.fixture
def settings(make_settings: Any) -> Any:
    return make_settings(straggler_cordon_after=2, straggler_cordon_seconds=600)


def _running(client: Any, admin_token: str, db: Any, launcher: Any) -> tuple[str, int, Any]:
    spec = tiny_spec()
    spec["resources"] = {"num_workers": 4, "gpus_per_worker": 0, "cpus_per_worker": 1}
    job_id = submit(client, admin_token, spec)["id"]
    n, token = claim(db, job_id)
    launcher.states[f"{job_id}-{n}"] = LaunchStatus(state=LaunchState.RUNNING)
    h = bearer(token)
    assert client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    for rank in range(4):
        node = "nodeB" if rank == 3 else "nodeA"
        body = {"rank": rank, "pid": 100 + rank, "node_id": node, "node_ip": f"10.0.0.{rank}"}
        r = client.post(internal(job_id, n, "workers"), json=body, headers=h)
        assert r.status_code == 200, r.text
    return job_id, n, h


def _post(client: Any, job_id: str, n: int, h: Any, step: int, points: dict[str, float]) -> None:
    body = {"points": [{"step": step, "name": k, "value": v} for k, v in points.items()]}
    r = client.post(internal(job_id, n, "metrics"), json=body, headers=h)
    assert r.status_code == 200, r.text


def _events(client: Any, admin_token: str, job_id: str, kind: str) -> list[str]:
    r = client.get(f"/v1/jobs/{job_id}/events", headers=bearer(admin_token))
    return [e["message"] for e in r.json()["data"] if e["type"] == kind]


def test_straggler_and_throughput_events_then_a_cordon(
    client: Any, admin_token: str, db: Any, launcher: Any
) -> None:
    job_id, n, h = _running(client, admin_token, db, launcher)
    even = _window(0.1, 0.1, 0.1, 0.1) | {"window/samples_per_s": 100.0}
    for step in (50, 100, 150):
        _post(client, job_id, n, h, step, even)
    assert _events(client, admin_token, job_id, "straggler") == []
    assert _events(client, admin_token, job_id, "throughput_dropped") == []

    slow = _window(0.1, 0.1, 0.1, 0.3) | {"window/samples_per_s": 40.0}
    _post(client, job_id, n, h, 200, slow)
    _post(client, job_id, n, h, 200, slow)  # a retried batch: judged once
    got = _events(client, admin_token, job_id, "straggler")
    assert len(got) == 1, got
    assert got[0].startswith("rank 3 on node 10.0.0.3 (nodeB) is a straggler"), got
    assert "step 200" in got[0] and "3.00x" in got[0] and "flagged 1 time" in got[0]
    drops = _events(client, admin_token, job_id, "throughput_dropped")
    assert len(drops) == 1 and "40 samples/s" in drops[0] and "median window 100" in drops[0]

    _post(client, job_id, n, h, 250, slow)  # the second flag cordons nodeB; still dropped
    got = _events(client, admin_token, job_id, "straggler")
    assert len(got) == 2 and "node cordoned until" in got[1], got
    assert len(_events(client, admin_token, job_id, "throughput_dropped")) == 1  # no repeat

    r = client.get("/v1/admin/nodes", headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    nodes = [NodeCordonModel.model_validate(x) for x in r.json()]
    assert [(x.node_id, x.cordoned, x.flags, x.total_flags) for x in nodes] == [
        ("nodeB", True, 0, 2)
    ]
    assert nodes[0].last_job_id == job_id and "2 straggler flags" in nodes[0].reason
    assert nodes[0].cordoned_until is not None

    text = client.get("/metrics").text
    assert f'shunter_job_rank_compute_seconds{{job="{job_id}",rank="3"}} 0.3' in text
    assert f'shunter_job_window_throughput{{job="{job_id}",unit="samples_per_s"}} 40.0' in text
    assert f'shunter_job_straggler_events_total{{job="{job_id}",type="straggler"}} 2.0' in text
    assert (
        f'shunter_job_straggler_events_total{{job="{job_id}",type="throughput_dropped"}} 1.0'
        in text
    )
    assert 'shunter_node_cordoned{ip="10.0.0.3",node="nodeB"} 1.0' in text
    assert 'shunter_training_health_events_total{type="straggler"} 2.0' in text
    assert "window/ranks" not in text

    # A window split over two batches (the sender's batch boundary) is judged once, complete.
    split = _window(0.1, 0.1, 0.1, 0.4) | {"window/samples_per_s": 100.0}
    first = {k: v for k, v in split.items() if not k.startswith("rank/3/")}
    _post(client, job_id, n, h, 300, first)
    assert len(_events(client, admin_token, job_id, "straggler")) == 2  # rank 3 not in yet
    _post(client, job_id, n, h, 300, {k: v for k, v in split.items() if k not in first})
    got = _events(client, admin_token, job_id, "straggler")
    assert len(got) == 3 and "step 300" in got[2] and "4.00x" in got[2], got

    r = client.delete("/v1/admin/nodes/nodeB/cordon", headers=bearer(admin_token))
    assert r.status_code == 204, r.text
    r = client.get("/v1/admin/nodes", headers=bearer(admin_token))
    assert r.json()[0]["cordoned"] is False
    r = client.delete("/v1/admin/nodes/nope/cordon", headers=bearer(admin_token))
    assert r.status_code == 404


def test_admin_only(client: Any, make_token: Any) -> None:
    member = make_token("team-s", "member")
    assert client.get("/v1/admin/nodes", headers=bearer(member)).status_code == 403
    assert client.delete("/v1/admin/nodes/n/cordon", headers=bearer(member)).status_code == 403


# -- placement -------------------------------------------------------------------------------


def _node(node_id: str, cpus: float) -> NodeResources:
    return NodeResources(
        node_id=node_id,
        address="127.0.0.1",
        alive=True,
        total_cpus=cpus,
        free_cpus=cpus,
        total_gpus=0,
        free_gpus=0,
    )


def _cordon(db: Any, node_id: str, until: datetime) -> None:
    def write(s: Any) -> None:
        s.merge(NodeCordon(node_id=node_id, node_ip="", reason="test", cordoned_until=until))

    db.write(write)


def test_cordoned_nodes_until_expiry(db: Any) -> None:
    now = datetime.now(UTC)
    _cordon(db, "n1", now + timedelta(seconds=600))
    _cordon(db, "n2", now - timedelta(seconds=1))  # expired
    assert db.read(lambda s: cordoned_nodes(s, now=now)) == {"n1"}
    assert db.read(lambda s: cordoned_nodes(s, now=now + timedelta(seconds=601))) == set()
    cluster = InMemoryLauncher(nodes=[_node("n1", 4), _node("n2", 2)]).cluster()
    free = capacity.free_now(without_cordoned(cluster, {"n1"}).nodes, [])
    assert [n.node_id for n in free] == ["n2"]


def test_scheduler_places_nothing_on_a_cordoned_node_until_it_expires(
    client: Any, admin_token: str, db: Any, launcher: InMemoryLauncher, make_settings: Any
) -> None:
    launcher.nodes = [_node("n1", 2)]
    sched = Scheduler(make_settings(), db, launcher)
    _cordon(db, "n1", datetime.now(UTC) + timedelta(seconds=600))
    job_id = submit(client, admin_token, tiny_spec())["id"]
    assert sched.tick().started == []
    job = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert job["status"] == "queued", job
    db.write(
        lambda s: s.execute(
            update(NodeCordon).values(cordoned_until=datetime.now(UTC) - timedelta(seconds=1))
        )
    )
    assert [s.rsplit("-", 1)[0] for s in sched.tick().started] == [job_id]


def test_an_attempt_is_told_the_cordoned_nodes_and_keeps_its_workers_off_them(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token, tiny_spec())["id"]
    n, token = claim(db, job_id)
    _cordon(db, "n1", datetime.now(UTC) + timedelta(seconds=600))
    _cordon(db, "n2", datetime.now(UTC) - timedelta(seconds=1))  # expired
    r = client.get(internal(job_id, n, "spec"), headers=bearer(token))
    assert r.status_code == 200, r.text
    assert r.json()["avoid_nodes"] == ["n1"]
    # The driver's ScalingConfig label selector (Ray's built-in node-id label).
    assert avoid_nodes_selector(["n3", "n1", ""]) == {"ray.io/node-id": "!in(n1,n3)"}
    assert avoid_nodes_selector([]) is None
