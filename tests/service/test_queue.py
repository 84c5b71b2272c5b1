"""Queue policy (pure): order, gang placement, quotas, backfill past a job that does not fit."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from service.policy.planner import (
    NodeFree,
    PolicyConfig,
    QueueDecision,
    QueueEntry,
    TeamQuota,
    TeamUsage,
    place_gang,
    plan,
)
from service.policy.preemption import PreemptRules
from service.policy.snapshot import ActiveJob, Snapshot, TeamState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def order_queue(
    entries: Sequence[QueueEntry],
    nodes: Sequence[NodeFree],
    *,
    usage: Mapping[str, TeamUsage] | None = None,
    quotas: Mapping[str, TeamQuota] | None = None,
) -> list[QueueDecision]:
    """``plan`` with priority-then-age order and backfill over free ``nodes``, quotas checked
    against ``usage`` (held as that many equal jobs); no fair share, reservations or
    preemption; totals unbounded, so no job is "never fits" by this view."""
    held = [
        ActiveJob(
            entry=QueueEntry(
                job_id=f"held-{team}-{i}",
                team=team,
                priority="normal",
                created_at=T0,
                num_workers=1,
                cpus_per_worker=u.cpus / u.running_jobs,
                gpus_per_worker=u.gpus / u.running_jobs,
            ),
            started_at=T0,
        )
        for team, u in (usage or {}).items()
        for i in range(u.running_jobs)
    ]
    snap = Snapshot(
        now=T0,
        totals=[NodeFree(node_id="unbounded", cpus=math.inf, gpus=math.inf)],
        free=list(nodes),
        queued=list(entries),
        active=held,
        teams={t: TeamState(quota=q) for t, q in (quotas or {}).items()},
    )
    off = PreemptRules(by_priority=False, by_fair_share=False)
    return plan(snap, PolicyConfig(fair_share=False, reservations=False, preempt=off)).decisions


def entry(
    job: str,
    *,
    team: str = "a",
    priority: str = "normal",
    t: int = 0,
    workers: int = 1,
    cpus: float = 1,
    gpus: float = 0,
) -> QueueEntry:
    return QueueEntry(
        job_id=job,
        team=team,
        priority=priority,
        created_at=T0 + timedelta(seconds=t),
        num_workers=workers,
        cpus_per_worker=cpus,
        gpus_per_worker=gpus,
    )


def node(nid: str, cpus: float, gpus: float = 0) -> NodeFree:
    return NodeFree(node_id=nid, cpus=cpus, gpus=gpus)


def test_order_priority_then_time_then_id() -> None:
    jobs = [
        entry("j1", priority="low", t=0),
        entry("j2", t=5),
        entry("j3", priority="high", t=9),
        entry("j0", t=5),
    ]
    got = order_queue(jobs, [node("n", 100)])
    assert [(d.entry.job_id, d.position) for d in got] == [
        ("j3", 1),
        ("j0", 2),
        ("j2", 3),
        ("j1", 4),
    ]
    assert all(d.start_now and d.reason is None for d in got)


def test_gang_all_or_nothing_per_node() -> None:
    big = entry("big", workers=2, cpus=3)
    assert place_gang(big, [node("a", 4), node("b", 2)]) is None  # 3+3 needs two 3-CPU slots
    assert sorted(place_gang(big, [node("a", 4), node("b", 3)]) or []) == ["a", "b"]
    gpu = entry("g", workers=2, cpus=1, gpus=1)
    assert place_gang(gpu, [node("a", 8, 1)]) is None
    assert place_gang(gpu, [node("a", 8, 2)]) == ["a", "a"]


def test_a_job_that_does_not_fit_is_skipped_and_a_smaller_one_behind_it_starts() -> None:
    jobs = [entry("q", team="capped", t=0), entry("big", t=1, workers=3), entry("small", t=2)]
    got = order_queue(
        jobs,
        [node("n", 2)],
        quotas={"capped": TeamQuota(max_running_jobs=1)},
        usage={"capped": TeamUsage(running_jobs=1)},
    )
    by = {d.entry.job_id: d for d in got}
    assert [d.position for d in got] == [1, 2, 3]
    assert not by["q"].start_now and "quota" in (by["q"].reason or "")
    assert not by["big"].start_now
    assert (by["big"].reason or "").startswith("waiting for resources: needs 3 x")
    assert "skipped for now: small, behind it, fits and starts" in (by["big"].reason or "")
    assert by["small"].start_now and by["small"].reason is None


def test_a_waiting_job_with_nothing_passing_it_says_only_what_it_needs() -> None:
    got = order_queue([entry("big", workers=3), entry("also-big", t=1, workers=3)], [node("n", 2)])
    assert [d.start_now for d in got] == [False, False]
    assert all("skipped" not in (d.reason or "") for d in got)


def test_free_resources_are_consumed_in_order() -> None:
    got = order_queue([entry("a", t=0, cpus=2), entry("b", t=1, cpus=2)], [node("n", 3)])
    assert [d.start_now for d in got] == [True, False]


def test_gpu_and_cpu_quotas() -> None:
    q = {"t": TeamQuota(max_gpus=2, max_cpus=4)}
    got = order_queue(
        [entry("a", team="t", gpus=1, workers=2), entry("b", team="t", gpus=1)],
        [node("n", 16, 8)],
        quotas=q,
    )
    assert [d.start_now for d in got] == [True, False]
    assert "GPUs" in (got[1].reason or "")


def test_pack_places_as_place_gang_then_take_would() -> None:
    import random

    from service.policy.capacity import pack, take

    rng = random.Random(4)
    for _ in range(200):
        nodes = [
            node(f"n{i}", rng.choice([4, 8, 16, 7.5]), rng.choice([0, 1, 2, 8]))
            for i in range(rng.randint(1, 9))
        ]
        gangs = [
            entry(
                f"g{k}",
                workers=rng.randint(1, 3),
                cpus=rng.choice([0.5, 1, 2, 4, 0.1]),
                gpus=rng.choice([0, 0, 1, 2, 0.5]),
            )
            for k in range(rng.randint(0, 12))
        ]
        free, want = list(nodes), []
        for g in gangs:
            placement = place_gang(g, free)
            want.append(placement)
            if placement is not None:
                free = take(free, placement, g)
        assert pack(nodes, gangs) == (free, want)
