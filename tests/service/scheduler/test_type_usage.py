"""The usage history per accelerator type (issue 30), real database, in-memory launcher: an
attempt keeps the type it ran on, and its team's decayed usage share counts it against that
type's GPUs (``scheduler.usage``), not against all the cluster's."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from service.db.sqltime import as_utc
from service.db.tables import Attempt, Job
from service.launch import ClusterResources, InMemoryLauncher, NodeResources
from service.scheduler.loop import Scheduler
from service.scheduler.usage import Usage
from tests.service.svc_helpers import bearer, tiny_spec

TYPES = {"small": {"memory_gb": 1.0, "weight": 1.0}, "big": {"memory_gb": 1.0, "weight": 2.5}}


def _node(node_id: str, accelerator: str) -> NodeResources:
    return NodeResources(
        node_id=node_id,
        address=f"10.0.0.{len(node_id)}",
        alive=True,
        total_cpus=8,
        free_cpus=8,
        total_gpus=4,
        free_gpus=4,
        accelerator=accelerator,
    )


@pytest.fixture
def launcher() -> Any:
    return InMemoryLauncher(nodes=[_node("n-small", "small"), _node("n-big", "big")])


@pytest.fixture
def settings(make_settings: Callable[..., Any]) -> Any:
    return make_settings(accelerator_types=TYPES)


def test_usage_share_is_per_type(
    client: Any, admin_token: str, db: Any, launcher: InMemoryLauncher, settings: Any
) -> None:
    spec = tiny_spec("big")
    spec["resources"] = {
        "num_workers": 1,
        "gpus_per_worker": 1,
        "cpus_per_worker": 1,
        "accelerator": "big",
    }
    r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert Scheduler(settings, db, launcher).tick().started
    team, started, on = db.read(
        lambda s: s.execute(
            select(Job.team, Attempt.started_at, Attempt.accelerator)
            .join(Job, Job.id == Attempt.job_id)
            .where(Attempt.job_id == job_id)
        ).one()
    )
    assert on == "big"
    now = as_utc(started) + timedelta(hours=1)
    cluster = ClusterResources(nodes=list(launcher.nodes))

    def share(weights: dict[str, float] | None) -> float:
        return db.read(
            lambda s: Usage().shares(
                s, now=now, half_life_s=3600.0, cluster=cluster, type_weights=weights
            )
        )[team]

    # One GPU held for one half-life averages 0.5 GPU: of the 4 big GPUs, 0.125 (pooled over
    # all 8 it would be 0.0625); weighted, big is the heaviest type: the same.
    assert share(None) == pytest.approx(0.125)
    assert share({"big": 2.5}) == pytest.approx(0.125)
    # Were small the heavier type, a big GPU would count 1/2.5 of one.
    assert share({"small": 2.5}) == pytest.approx(max(0.125 / 2.5, 0.5 / 16))
    assert not math.isclose(share(None), 0.5 / 8)
