"""Per-type EASY reservations (issue 30 item 1): on a mixed cluster a blocked job whose types
no holder accepts gets its own reservation on its types' nodes, and a backfill there that
would delay it is refused. Pure unit tests over ``policy.planner``."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from service.policy.capacity import NodeFree, place_gang
from service.policy.eta import estimate_ranges
from service.policy.planner import Plan, WaitKind, plan
from service.policy.reservations import Holder, free_at
from service.policy.snapshot import ActiveJob, QueueEntry, Snapshot
from tests.service.scheduler.policy_helpers import at, job

A100, H100 = "a100-40gb", "h100-80gb"


def _typed(job_id: str, types: tuple[str, ...], **kw: Any) -> QueueEntry:
    return replace(job(job_id, **kw), accelerators=types)


def _mixed(queued: list[QueueEntry], *, h100_queued_first: bool = False) -> Snapshot:
    """One A100 and one H100 node of 8 GPUs at t=1000: an 8-GPU A100 job runs until 5000,
    a 6-GPU H100 job until 3000 (2 H100 GPUs free)."""
    totals = [
        NodeFree(node_id="n0", cpus=64, gpus=8, accelerator=A100),
        NodeFree(node_id="n1", cpus=64, gpus=8, accelerator=H100),
    ]
    active = [
        ActiveJob(
            entry=_typed("ra", (A100,), gpus=8), started_at=at(0), expected_end_at=at(5000),
            accelerator=A100,
        ),
        ActiveJob(
            entry=_typed("rh", (H100,), gpus=6), started_at=at(0), expected_end_at=at(3000),
            accelerator=H100,
        ),
    ]  # fmt: skip
    free = free_at(totals, [Holder(entry=a.entry, end_at=None) for a in active], at(1000))
    return Snapshot(now=at(1000), totals=totals, free=free, queued=queued, active=active)


def _by_id(p: Plan) -> dict[str, Any]:
    return {d.entry.job_id: d for d in p.decisions}


def _queue(*extra: QueueEntry) -> list[QueueEntry]:
    return [
        _typed("qa", (A100,), gpus=8, t=10, preemptible=False),  # the first reservation
        _typed("qh", (H100,), gpus=8, t=20, preemptible=False),
        *extra,
    ]


def test_an_h100_job_keeps_its_reservation_while_an_a100_job_holds_the_first() -> None:
    p = plan(_mixed(_queue()))
    d = _by_id(p)
    assert p.reservation is not None and p.reservation.entry.job_id == "qa"
    assert p.reservation.start_at == at(5000)
    assert [(r.entry.job_id, r.start_at) for r in p.reservations] == [
        ("qa", at(5000)),
        ("qh", at(3000)),  # from the H100 node's running job alone
    ]
    assert d["qh"].wait.reserved and d["qh"].wait.reservation.entry.job_id == "qh"
    assert "reserved: expected to start 2026-01-01T00:50:00Z" in d["qh"].reason


def test_a_backfill_that_would_delay_the_h100_reservation_is_refused_one_ending_before_starts() -> (
    None
):
    long = _typed("long", (H100,), gpus=2, t=30, max_runtime_s=10_000)
    short = _typed("short", (H100,), gpus=2, t=40, max_runtime_s=1500)  # ends at 2500 < 3000
    p = plan(_mixed(_queue(long, short)))
    d = _by_id(p)
    assert not d["long"].start_now
    assert d["long"].wait.kind == WaitKind.BEHIND_RESERVATION
    assert d["long"].wait.reservation.entry.job_id == "qh"
    assert "would delay qh, which holds a reservation from" in d["long"].reason
    assert d["short"].start_now and d["short"].placement == ["n1"]
    # Without the second reservation the long one would have started (the A100 holder's
    # start is not delayed by a job on the H100 node): the refusal is the H100 one's.
    p1 = plan(_mixed([_queue()[0], long]))
    assert _by_id(p1)["long"].start_now


def test_the_eta_forward_run_keeps_the_h100_reservation_as_the_plan_does() -> None:
    # H100 node: rh (6 GPUs) ends at 3000, rh2 (2 GPUs) at 2000. qa holds the A100
    # reservation (5000) and qh the H100 one (3000): "long" would delay qh and "short" ends
    # before it, as in the plan. With one reservation, taken on any type's nodes, the
    # forward run reserved the H100 node for qa (3000) and gave qh 5000, "long" 7000.
    snap = _mixed([])
    rh = replace(snap.active[1], entry=_typed("rh", (H100,), gpus=6))
    rh2 = replace(rh, entry=_typed("rh2", (H100,), gpus=2), expected_end_at=at(2000))
    long = _typed("long", (H100,), gpus=2, t=30, max_runtime_s=10_000)
    # (a shape of its own: the forward run starts a shape's jobs in order, ``Backfill``)
    short = _typed("short", (H100,), gpus=1, t=40, max_runtime_s=500)  # 2000 -> 2500
    qh = _typed("qh", (H100,), gpus=8, t=20, preemptible=False, max_runtime_s=2000)
    free = [replace(n, gpus=0) if n.node_id == "n1" else n for n in snap.free]
    snap = replace(
        snap, queued=[_queue()[0], qh, long, short], active=[snap.active[0], rh, rh2], free=free
    )
    d = _by_id(plan(snap))
    assert [(i, d[i].wait.reservation.start_at) for i in ("qa", "qh")] == [
        ("qa", at(5000)),
        ("qh", at(3000)),
    ]
    got = estimate_ranges(snap)
    assert got["short"].start == at(2000)
    assert got["qh"].start == at(3000)  # its own reservation: rh's end
    assert got["long"].start == at(5000)  # behind qh (2000 s on the whole H100 node)
    assert got["qa"].start == at(5000)  # ra's end, on the A100 node


def test_an_unbounded_preemptible_job_does_not_borrow_a_type_reservation() -> None:
    free_rider = _typed("free", (H100,), gpus=2, t=30)  # preemptible, no bound
    p = plan(_mixed(_queue(free_rider)))
    assert _by_id(p)["free"].wait.kind == WaitKind.BEHIND_RESERVATION


def test_jobs_sharing_a_type_or_asking_none_get_no_second_reservation() -> None:
    either = _typed("either", (H100, A100), gpus=8, t=20)  # shares A100 with qa
    any_node = job("any", gpus=8, t=20)  # asks for no type: any node
    for second in (either, any_node):
        p = plan(_mixed([_queue()[0], second]))
        assert [r.entry.job_id for r in p.reservations] == ["qa"], second.job_id
    # An untyped first holder accepts every node: nobody gets a second one.
    p = plan(_mixed([replace(any_node, job_id="first", created_at=at(5)), *_queue()]))
    assert [r.entry.job_id for r in p.reservations] == ["first"]


def test_the_incomplete_pass_starts_and_reserves_as_the_complete_one() -> None:
    long = _typed("long", (H100,), gpus=2, t=30, max_runtime_s=10_000)
    short = _typed("short", (H100,), gpus=2, t=40, max_runtime_s=1500)
    snap = _mixed(_queue(long, short, replace(long, job_id="long2", created_at=at(50))))
    full, part = plan(snap), plan(snap, complete=False)
    assert [d.entry.job_id for d in full.starts] == [d.entry.job_id for d in part.starts]
    assert [d.entry.job_id for d in full.starts] == ["short"]
    assert full.reservations == part.reservations


def test_on_random_mixed_clusters_no_start_delays_any_reservation() -> None:
    """Property: every reservation's holder still fits at its start with every running job
    and every job the plan starts that is bounded past it (or unbounded) still running, and
    the early-stopping pass starts, reserves and preempts as the complete one."""
    from service.policy.plan_types import bound_end

    rng = random.Random(11)
    kinds = [(A100,), (H100,), (A100, H100), (H100, A100), ()]
    for case in range(150):
        totals = [
            NodeFree(node_id=f"n{i}", cpus=64, gpus=8, accelerator=rng.choice([A100, H100]))
            for i in range(rng.randint(2, 4))
        ]
        active = []
        for k in range(rng.randint(1, 5)):
            node = rng.choice(totals)
            e = _typed(f"r{k}", (node.accelerator,), gpus=rng.choice([2, 4, 8]))
            end = rng.choice([None, 2000, 3000, 6000])
            active.append(
                ActiveJob(entry=e, started_at=at(0), expected_end_at=None if end is None
                          else at(end), accelerator=node.accelerator)
            )  # fmt: skip
        free = free_at(totals, [Holder(entry=a.entry, end_at=None) for a in active], at(1000))
        if any(f.gpus < 0 for f in free):
            continue
        queued = [
            _typed(f"q{k}", rng.choice(kinds), gpus=rng.choice([1, 2, 4, 8]), t=k,
                   max_runtime_s=rng.choice([None, 500, 1500, 4000, 9000]),
                   preemptible=rng.random() < 0.5, team=rng.choice("ab"))
            for k in range(rng.randint(3, 14))
        ]  # fmt: skip
        snap = Snapshot(now=at(1000), totals=totals, free=free, queued=queued, active=active)
        full, part = plan(snap), plan(snap, complete=False)
        assert full.starts == part.starts, case
        assert full.reservation == part.reservation and full.preemptions == part.preemptions
        holders = [Holder(entry=a.entry, end_at=a.expected_end_at) for a in active]
        started = [Holder(entry=d.entry, end_at=bound_end(d.entry, snap.now)) for d in full.starts]
        for r in full.reservations[1:]:  # the first may be borrowed (then reclaimed)
            if r.start_at is None:
                continue
            there = free_at(totals, [*holders, *started], r.start_at)
            assert place_gang(r.entry, there) is not None, (case, r.entry.job_id)
