"""Accelerator types in the policy (issue 30): typed placement, preference order, per-type
quotas. Pure unit tests over ``policy.capacity`` and ``policy.planner``."""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from service.policy.capacity import FreeBuckets, NodeFree, pack, place_gang, take
from service.policy.planner import WaitKind, plan
from service.policy.snapshot import ActiveJob, QueueEntry, Snapshot, TeamQuota, TeamState
from tests.service.scheduler.policy_helpers import at, job

A100, H100 = "a100-40gb", "h100-80gb"


def _nodes(*types: str, gpus: float = 8, cpus: float = 64) -> list[NodeFree]:
    return [
        NodeFree(node_id=f"n{i}", cpus=cpus, gpus=gpus, accelerator=t) for i, t in enumerate(types)
    ]


def _typed(job_id: str, types: tuple[str, ...], **kw: Any) -> QueueEntry:
    return replace(job(job_id, **kw), accelerators=types)


def test_a_typed_gang_lands_only_on_its_type_and_never_spans_types() -> None:
    nodes = _nodes(A100, H100, A100)
    g = _typed("j", (H100,), gpus=4, workers=2)
    assert place_gang(g, nodes) == ["n1", "n1"]
    big = _typed("k", (H100,), gpus=8, workers=2)  # 16 H100 GPUs: one H100 node only
    assert place_gang(big, nodes) is None
    either = _typed("e", (A100, H100), gpus=8, workers=2)  # two A100 nodes hold it
    assert place_gang(either, nodes) == ["n0", "n2"]
    assert place_gang(job("any", gpus=8, workers=3), nodes) is not None  # any: as before


def test_preference_order_then_the_next_type_when_the_first_is_full() -> None:
    nodes = _nodes(A100, H100)
    pref = _typed("p", (H100, A100), gpus=8)
    assert place_gang(pref, nodes) == ["n1"]
    after = take(nodes, ["n1"], pref)
    assert place_gang(pref, after) == ["n0"]  # H100 full: the next acceptable type
    assert place_gang(_typed("h", (H100,), gpus=1), after) is None


def test_buckets_and_pack_place_typed_gangs_as_place_gang() -> None:
    rng = random.Random(7)
    for _ in range(200):
        nodes = [
            NodeFree(
                node_id=f"n{i}",
                cpus=float(rng.choice([8, 16])),
                gpus=float(rng.choice([0, 2, 4, 8])),
                accelerator=rng.choice(["", A100, H100]),
            )
            for i in range(rng.randint(1, 6))
        ]
        gangs = [
            _typed(
                f"g{k}",
                tuple(rng.sample([A100, H100], rng.randint(0, 2))),
                gpus=rng.choice([0, 1, 2, 4]),
                workers=rng.randint(1, 3),
                cpus=rng.choice([1, 4]),
            )
            for k in range(rng.randint(1, 6))
        ]
        free, want = list(nodes), []
        for g in gangs:
            pl = place_gang(g, free)
            want.append(pl)
            if pl is not None:
                free = take(free, pl, g)
        got_free, got = pack(nodes, gangs)
        assert got == want
        assert got_free == free
        assert all(n.accelerator == m.accelerator for n, m in zip(got_free, nodes, strict=True))
        fb = FreeBuckets(nodes)
        first = fb.place(gangs[0])
        assert (None if first is None else [fb.ids[i] for i in first]) == want[0]


def _snap(active: list[ActiveJob], queued: list[QueueEntry], quota: TeamQuota) -> Snapshot:
    totals = _nodes(A100, H100)
    used = {n.node_id: [n.cpus, n.gpus] for n in totals}
    for a in active:
        nid = next(n.node_id for n in totals if n.accelerator == a.accelerator)
        used[nid][0] -= a.entry.cpus
        used[nid][1] -= a.entry.gpus
    free = [replace(n, cpus=used[n.node_id][0], gpus=used[n.node_id][1]) for n in totals]
    return Snapshot(
        now=at(1000),
        totals=totals,
        free=free,
        queued=queued,
        active=active,
        teams={"a": TeamState(quota=quota)},
    )


def test_per_type_quota_moves_a_job_that_accepts_both_to_the_other_type() -> None:
    held = ActiveJob(entry=_typed("r", (H100,), gpus=4), started_at=at(0), accelerator=H100)
    quota = TeamQuota(max_gpus_by_type={H100: 4})
    both = _typed("both", (H100, A100), gpus=2, t=10)
    only = _typed("only", (H100,), gpus=2, t=20)
    p = plan(_snap([held], [both, only], quota))
    d = {x.entry.job_id: x for x in p.decisions}
    assert d["both"].start_now and d["both"].placement == ["n0"]  # A100 node: H100 quota full
    assert not d["only"].start_now
    assert d["only"].wait is not None and d["only"].wait.kind == WaitKind.QUOTA
    assert H100 in (d["only"].reason or "")
    # Without the per-type quota the H100 job starts on the H100 node's free GPUs.
    p2 = plan(_snap([held], [only], TeamQuota()))
    assert p2.decisions[0].start_now and p2.decisions[0].placement == ["n1"]


def test_a_job_for_any_type_within_a_per_type_quota_takes_the_type_left() -> None:
    held = ActiveJob(entry=_typed("r", (H100,), gpus=4), started_at=at(0), accelerator=H100)
    anyj = job("any", gpus=2, t=10)
    p = plan(_snap([held], [anyj], TeamQuota(max_gpus_by_type={H100: 4, A100: 8})))
    assert p.decisions[0].start_now and p.decisions[0].placement == ["n0"]
    full = plan(_snap([held], [anyj], TeamQuota(max_gpus_by_type={H100: 4, A100: 0})))
    assert full.decisions[0].wait is not None and full.decisions[0].wait.kind == WaitKind.QUOTA


def test_never_fits_names_the_type() -> None:
    snap = Snapshot(
        now=at(0),
        totals=_nodes(A100, A100),
        free=_nodes(A100, A100),
        queued=[_typed("h", (H100,), gpus=1)],
    )
    d = plan(snap).decisions[0]
    assert d.wait is not None and d.wait.kind == WaitKind.NEVER_FITS
    assert f"of type {H100}" in d.wait.detail
