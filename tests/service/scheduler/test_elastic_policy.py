"""``policy.elastic.decide`` on hand-built snapshots: the resize rules one by one."""

from __future__ import annotations

from dataclasses import replace

from service.policy.elastic import (
    RESIZE_GROW,
    RESIZE_RECLAIM,
    RESIZE_SHRINK,
    RESIZE_START,
    Resizing,
    decide,
)
from service.policy.planner import Plan, PolicyConfig, plan
from service.policy.snapshot import QueueEntry, Snapshot, TeamQuota, TeamState
from tests.service.scheduler.policy_helpers import job, running, snapshot

CFG = PolicyConfig.named("fair")
NODE = [(4.0, 0.0)]  # one node, 4 CPU workers' worth


def _elastic(job_id: str, width: int, lo: int = 2, hi: int = 4, **kw: object) -> QueueEntry:
    return replace(job(job_id, workers=width, **kw), min_workers=lo, max_workers=hi)  # type: ignore[arg-type]


def _decide(snap: Snapshot) -> tuple[Plan, Resizing]:
    p = plan(snap, CFG)
    return p, decide(snap, p, min_runtime_s=CFG.preempt.min_runtime_s)


def test_a_queued_elastic_job_starts_on_min_beside_another_job() -> None:
    other = running(job("other", team="b", workers=2), started=0)
    snap = snapshot(now=10, nodes=NODE, queued=[_elastic("e", 2, t=5)], active=[other])
    p, rs = _decide(snap)
    assert [d.entry.job_id for d in p.starts] == ["e"]
    assert rs.resizes == []  # nothing idle left to start it wider


def test_it_starts_wider_when_nothing_waits() -> None:
    snap = snapshot(now=10, nodes=NODE, queued=[_elastic("e", 2, t=5)])
    _, rs = _decide(snap)
    assert [(r.job_id, r.to, r.kind) for r in rs.resizes] == [("e", 4, RESIZE_START)]


def test_it_grows_when_capacity_frees_and_nobody_waits_after_the_min_runtime() -> None:
    e = _elastic("e", 2)
    early = snapshot(now=100, nodes=NODE, queued=[], active=[running(e, started=0)])
    assert _decide(early)[1].resizes == []  # 100 s < the 300 s between resizes
    late = snapshot(now=400, nodes=NODE, queued=[], active=[running(e, started=0)])
    rs = _decide(late)[1]
    assert [(r.job_id, r.to, r.kind) for r in rs.resizes] == [("e", 4, RESIZE_GROW)]
    assert "no job waits" in rs.resizes[0].reason()


def test_a_grow_stays_within_the_team_quota() -> None:
    e = _elastic("e", 2, cpus=1)
    teams = {"a": TeamState(quota=TeamQuota(max_cpus=3))}
    snap = snapshot(now=400, nodes=NODE, queued=[], active=[running(e, started=0)], teams=teams)
    assert [(r.to, r.kind) for r in _decide(snap)[1].resizes] == [(3, RESIZE_GROW)]


def test_no_grow_while_a_job_waits_for_capacity() -> None:
    e, rigid = _elastic("e", 2), job("big", team="b", workers=3, t=50)
    snap = snapshot(now=400, nodes=NODE, queued=[rigid], active=[running(e, started=0)])
    p, rs = _decide(snap)
    assert p.starts == [] and rs.resizes == []


def test_a_higher_priority_job_shrinks_it_instead_of_preempting_it() -> None:
    e = _elastic("e", 4, team="b")
    urgent = job("urgent", team="a", priority="high", workers=2, t=100)
    snap = snapshot(now=110, nodes=NODE, queued=[urgent], active=[running(e, started=0)])
    p, rs = _decide(snap)
    assert [v.victim.job_id for v in p.preemptions] == ["e"]  # what plan alone decides
    assert rs.preemptions == []
    assert [(r.job_id, r.to, r.kind, r.cause) for r in rs.resizes] == [
        ("e", 2, RESIZE_SHRINK, "priority")
    ]
    assert "instead of preemption" in rs.resizes[0].reason()


def test_only_as_narrow_as_the_waiting_job_needs() -> None:
    e = _elastic("e", 4, lo=1, team="b")
    urgent = job("urgent", team="a", priority="high", workers=1, t=100)
    snap = snapshot(now=110, nodes=NODE, queued=[urgent], active=[running(e, started=0)])
    assert [(r.to, r.kind) for r in _decide(snap)[1].resizes] == [(3, RESIZE_SHRINK)]


def test_at_min_it_is_preempted_as_before() -> None:
    e = _elastic("e", 2, team="b")
    rigid = running(job("r", team="b", workers=2), started=0)
    urgent = job("urgent", team="a", priority="high", workers=4, t=100)
    snap = snapshot(now=110, nodes=NODE, queued=[urgent], active=[running(e, started=0), rigid])
    _, rs = _decide(snap)
    assert sorted(v.victim.job_id for v in rs.preemptions) == ["e", "r"]
    assert rs.resizes == []


def test_lent_workers_are_taken_back_for_a_waiting_job_of_the_same_class() -> None:
    e = _elastic("e", 4, team="b")  # grew while nothing waited
    waiting = job("w", team="a", workers=1, t=100)  # same class: no preemption cause
    snap = snapshot(now=110, nodes=NODE, queued=[waiting], active=[running(e, started=0)])
    p, rs = _decide(snap)
    assert p.preemptions == []
    assert [(r.job_id, r.to, r.kind) for r in rs.resizes] == [("e", 3, RESIZE_RECLAIM)]


def test_rigid_snapshots_are_left_alone() -> None:
    urgent = job("urgent", team="a", priority="high", workers=2, t=100)
    r = running(job("r", team="b", workers=4), started=0)
    snap = snapshot(now=110, nodes=NODE, queued=[urgent], active=[r])
    p, rs = _decide(snap)
    assert rs.preemptions == p.preemptions and rs.resizes == []
