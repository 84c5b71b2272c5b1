"""GPU types through the service (issue 30 item 1), real database, in-memory launcher.

Type names are checked at submit (422 naming the field and the known types); the memory plan
is checked against each type's card (a job no card holds: 422 naming the largest card and
the plan's bytes; otherwise ``resources.accelerator`` keeps the types that hold it); the
admin's per node group type overrides Ray's; a typed job's attempt may use only the nodes
of the type the plan chose; ``GET /v1/cluster`` shows capacity by type."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from service.db.tables import Attempt, Job
from service.launch import InMemoryLauncher, NodeResources
from service.scheduler.loop import Scheduler
from tests.service.svc_helpers import bearer, tiny_spec

# The tiny model's plan is a few MB a GPU: "small" cards (about 1 KB) hold none of it.
TYPES = {"small": {"memory_gb": 1e-6, "weight": 1.0}, "big": {"memory_gb": 1.0, "weight": 2.5}}


def _node(node_id: str, *, accelerator: str = "", group: str = "") -> NodeResources:
    return NodeResources(
        node_id=node_id,
        address=f"10.0.0.{len(node_id)}",
        alive=True,
        total_cpus=8,
        free_cpus=8,
        total_gpus=4,
        free_gpus=4,
        accelerator=accelerator,
        node_group=group,
    )


@pytest.fixture
def launcher() -> Any:
    # "n-small" says no type to Ray; the admin names its node group's ("pool-s") type.
    return InMemoryLauncher(
        nodes=[_node("n-small", group="pool-s"), _node("n-big", accelerator="big")]
    )


@pytest.fixture
def settings(make_settings: Callable[..., Any]) -> Any:
    return make_settings(accelerator_types=TYPES, node_group_accelerators={"pool-s": "small"})


def _spec(name: str, accelerator: Any = None) -> dict[str, Any]:
    s = tiny_spec(name)
    s["resources"] = {"num_workers": 1, "gpus_per_worker": 1, "cpus_per_worker": 1}
    if accelerator is not None:
        s["resources"]["accelerator"] = accelerator
    return s


def test_unknown_type_is_a_422_naming_the_field_and_the_known_types(
    client: Any, admin_token: str
) -> None:
    r = client.post("/v1/jobs", json=_spec("u", "h100"), headers=bearer(admin_token))
    assert r.status_code == 422, r.text
    text = r.text
    assert "resources.accelerator" in text and "'h100'" in text
    assert "big" in text and "small" in text


def test_the_memory_plan_picks_the_cards_that_hold_it(
    client: Any, admin_token: str, db: Any, launcher: InMemoryLauncher, settings: Any
) -> None:
    small = client.post("/v1/jobs", json=_spec("s", ["small"]), headers=bearer(admin_token))
    assert small.status_code == 422, small.text
    assert "resources.accelerator" in small.text and "bytes" in small.text
    assert "largest card asked for is small" in small.text
    anyj = client.post("/v1/jobs", json=_spec("any"), headers=bearer(admin_token))
    assert anyj.status_code == 201, anyj.text
    job_id = anyj.json()["id"]
    stored = db.read(lambda s: s.get(Job, job_id).spec)  # the running spec: narrowed
    assert stored["resources"]["accelerator"] == ["big"]
    report = Scheduler(settings, db, launcher).tick()
    assert [s.rsplit("-", 1)[0] for s in report.started] == [job_id]
    req = launcher.submitted[report.started[0]]
    assert req.only_nodes == ("n-big",)  # the big cards' nodes, nothing else


def test_a_job_asking_a_type_lands_on_its_nodes_and_cluster_shows_types(
    client: Any, admin_token: str, db: Any, launcher: InMemoryLauncher, settings: Any
) -> None:
    cpu = tiny_spec("cpu")
    cpu["resources"] = {
        "num_workers": 1,
        "gpus_per_worker": 0,
        "cpus_per_worker": 1,
        "accelerator": "small",  # CPU workers on the small type's nodes (no memory check)
    }
    r = client.post("/v1/jobs", json=cpu, headers=bearer(admin_token))
    assert r.status_code == 201, r.text
    report = Scheduler(settings, db, launcher).tick()
    assert launcher.submitted[report.started[0]].only_nodes == ("n-small",)
    c = client.get("/v1/cluster", headers=bearer(admin_token)).json()
    assert {n["node_id"]: n["accelerator"] for n in c["nodes"]} == {
        "n-small": "small",
        "n-big": "big",
    }
    assert c["by_type"]["big"] == {
        "nodes": 1,
        "total_gpus": 4.0,
        "free_gpus": 4.0,
        "memory_gb": 1.0,
        "weight": 2.5,
    }
    assert c["by_type"]["small"]["nodes"] == 1


def test_per_type_quota_holds_live_and_attempts_keep_their_type(
    client: Any,
    admin_token: str,
    db: Any,
    launcher: InMemoryLauncher,
    settings: Any,
    make_token: Callable[..., str],
) -> None:
    r = client.post(
        "/v1/teams",
        json={"name": "q", "quota": {"max_gpus_by_type": {"BIG": 1}}},
        headers=bearer(admin_token),
    )
    assert r.status_code == 201, r.text
    assert r.json()["quota"]["max_gpus_by_type"] == {"big": 1.0}
    member = make_token("q", "member")
    ids = []
    for name in ("one", "two"):
        got = client.post("/v1/jobs", json=_spec(name), headers=bearer(member))
        assert got.status_code == 201, got.text
        ids.append(got.json()["id"])
    sched = Scheduler(settings, db, launcher)
    assert [s.rsplit("-", 1)[0] for s in sched.tick().started] == ids[:1]
    attempt = db.read(lambda s: s.query(Attempt).filter(Attempt.job_id == ids[0]).one())
    assert attempt.accelerator == "big"
    sched.tick()
    waiting = db.read(lambda s: s.get(Job, ids[1]))
    assert waiting.status == "queued"
    assert "per accelerator type" in (waiting.pending_reason or ""), waiting.pending_reason
    assert "big 1/1" in (waiting.pending_reason or "")


def test_gpu_hours_are_weighted_by_the_type_they_ran_on(
    client: Any,
    admin_token: str,
    db: Any,
    launcher: InMemoryLauncher,
    settings: Any,
    make_token: Callable[..., str],
) -> None:
    member = make_token("w", "member")
    job_id = client.post("/v1/jobs", json=_spec("w"), headers=bearer(member)).json()["id"]
    assert Scheduler(settings, db, launcher).tick().started
    since = (datetime.now(UTC) - timedelta(seconds=1000)).isoformat()

    def _backdate(s: Any) -> None:  # the attempt has held its "big" GPU for 1000 s
        a = s.query(Attempt).filter(Attempt.job_id == job_id).one()
        assert a.accelerator == "big"
        a.started_at = datetime.now(UTC) - timedelta(seconds=1000)

    db.write(_backdate)
    usage = client.get(
        "/v1/teams/w/usage", params={"since": since}, headers=bearer(admin_token)
    ).json()
    # 1 GPU x ~1000 s x the "big" type's weight 2.5 (unweighted it would be ~1000).
    assert 2.5 * 990 <= usage["gpu_seconds"] <= 2.5 * 1100, usage
