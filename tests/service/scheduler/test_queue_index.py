"""The queue index the simulator keeps across ticks, and the early-stopping pass that orders
the rest without deciding it: both must give what the complete pass over a fresh index
gives (randomised snapshots)."""

from __future__ import annotations

import itertools
import random
from dataclasses import replace

import pytest

from service.policy.eta import estimate_starts
from service.policy.planner import PolicyConfig, plan
from service.policy.queue_index import QueueIndex
from service.policy.snapshot import QueueEntry, TeamQuota, TeamState
from tests.service.scheduler.policy_helpers import job, running, snapshot

SHAPES = [(1, 8, 1), (1, 16, 2), (1, 32, 4), (1, 64, 8), (2, 64, 8), (5, 64, 8)]


def _queue(rng: random.Random, n: int) -> list[QueueEntry]:
    out = []
    for i in range(n):
        workers, cpus, gpus = rng.choice(SHAPES)
        out.append(
            job(
                f"j{i:03d}",
                team=rng.choice("abc"),
                priority=rng.choice(["normal", "normal", "high", "low"]),
                t=rng.randint(0, 50),
                workers=workers,
                cpus=cpus,
                gpus=gpus,
                max_runtime_s=rng.choice([None, 300.0, 3600.0, float(rng.randint(60, 9000))]),
                preemptible=rng.random() < 0.8,
            )
        )
    return out


def _view(idx: QueueIndex) -> tuple[object, object]:
    teams = {t: [e.job_id for _, e in rows] for t, rows in idx.per_team.items() if rows}
    shapes = {s: (st.count, st.preemptible, st.lefts) for s, st in idx.shapes.items()}
    return teams, shapes


@pytest.mark.parametrize("use_priority", [True, False])
def test_an_index_kept_by_add_and_remove_equals_one_built_afresh(use_priority: bool) -> None:
    rng = random.Random(4)
    entries = _queue(rng, 120)
    kept = QueueIndex(use_priority=use_priority)
    present: list[QueueEntry] = []
    for e in entries:
        kept.add(e)
        present.append(e)
        if rng.random() < 0.4:
            gone = present.pop(rng.randrange(len(present)))
            kept.remove(gone)
        built = QueueIndex.build(present, use_priority=use_priority)
        assert _view(kept) == _view(built) and len(kept) == len(present)


def test_an_index_synced_tick_by_tick_equals_one_built_afresh() -> None:
    """The live loop's index: synced by identity to each tick's entries (a few come, go or
    are rebuilt), it holds what a fresh build holds; a tick that changes most of it builds
    a new one."""
    rng = random.Random(5)
    pool = _queue(rng, 200)
    present = {e.job_id: e for e in pool[:100]}
    idx = QueueIndex(use_priority=True).sync(present.values())
    for _ in range(30):
        for _ in range(rng.randint(0, 6)):  # some leave, some come, some are read anew
            present.pop(rng.choice(list(present)), None)
            e = rng.choice(pool)
            present[e.job_id] = replace(e) if rng.random() < 0.5 else e
        before = idx
        idx = idx.sync(present.values())
        assert idx is before  # a small change is applied in place
        assert _view(idx) == _view(QueueIndex.build(present.values(), use_priority=True))
    other = {e.job_id: e for e in pool[100:]}
    assert idx.sync(other.values()) is not idx
    assert _view(idx.sync(other.values())) == _view(
        QueueIndex.build(other.values(), use_priority=True)
    )


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", ["fair", "priority", "fifo"])
def test_the_early_stopping_pass_orders_the_rest_as_the_complete_pass(
    seed: int, policy: str
) -> None:
    rng = random.Random(seed)
    queued = _queue(rng, 60)
    active = []
    for k, e in enumerate(_queue(rng, 10)):
        e = job(f"r{k}", team=e.team, cpus=8, gpus=1, max_runtime_s=e.max_runtime_s)
        active.append(running(e, started=rng.randint(0, 40), end=rng.choice([None, 200, 4000])))
    teams = {
        "a": TeamState(weight=1, owed_s=rng.uniform(-500, 500)),
        "b": TeamState(weight=2, quota=TeamQuota(max_gpus=rng.choice([None, 4.0, 12.0]))),
        "c": TeamState(weight=1, history_share=rng.random()),
    }
    snap = snapshot(
        now=60, nodes=[(64, 8)] * rng.randint(2, 4), queued=queued, active=active, teams=teams
    )
    cfg = PolicyConfig.named(policy)
    full = plan(snap, cfg)
    fast = plan(snap, cfg, complete=False, order_depth=None)
    assert fast.starts == full.starts
    assert fast.reservation == full.reservation and fast.preemptions == full.preemptions
    assert [e.job_id for e in fast.in_order()] == [e.job_id for e in full.in_order()]
    depth = plan(snap, cfg, complete=False, order_depth=20)
    first = {d.entry.job_id for d in full.decisions[:20]}
    expect = [e.job_id for e in full.in_order() if e.job_id in first]
    got = [e.job_id for e in depth.in_order()]
    assert got == expect or (len(depth.decisions) > 20 and got[: len(expect)] == expect)
    # ETAs wanted only for the plan's leading starts need no forward run: the same answer.
    lead = [d.entry.job_id for d in itertools.takewhile(lambda d: d.start_now, full.decisions)]
    every = estimate_starts(snap, plan_now=full)
    assert estimate_starts(snap, plan_now=full, want=lead) == {i: every[i] for i in lead}


def test_a_one_worker_gang_goes_where_the_sorted_first_fit_puts_it() -> None:
    """``place_gang``'s one-worker path (no sort) against first fit over the nodes sorted
    fullest first (stable: list order breaks ties)."""
    from service.policy.capacity import EPS, NodeFree, place_gang

    rng = random.Random(2)
    for _ in range(3000):
        free = [
            NodeFree(
                node_id=f"n{i}",
                cpus=rng.choice([0, 4, 8, 0.1 + 0.2]),
                gpus=rng.choice([0, 1, 2, 0.3]),
            )
            for i in range(rng.randint(0, 8))
        ]
        need = job("x", cpus=rng.choice([0, 0.3, 4, 8]), gpus=rng.choice([0, 0.3, 1, 2]))
        ranked = sorted(free, key=lambda n: (n.gpus, n.cpus))
        fit = [
            n.node_id
            for n in ranked
            if n.cpus + EPS >= need.cpus_per_worker and n.gpus + EPS >= need.gpus_per_worker
        ]
        assert place_gang(need, free) == (fit[:1] or None)


def test_free_buckets_place_as_place_gang_while_nodes_move() -> None:
    """``FreeBuckets`` (``pack`` and the ETA forward run) against ``place_gang`` over the same
    nodes, as random placements and gives move them (fractional free levels included)."""
    from service.policy.capacity import FreeBuckets, NodeFree, place_gang

    rng = random.Random(3)
    levels = [0, 0.3, 1, 2, 4, 8, 0.1 + 0.2]
    for _ in range(300):
        nodes = [
            NodeFree(node_id=f"n{i}", cpus=rng.choice(levels) * 8, gpus=rng.choice(levels))
            for i in range(rng.randint(0, 12))
        ]
        free = FreeBuckets(nodes)
        for _ in range(20):
            need = job(
                "x",
                workers=rng.choice([1, 1, 2, 3]),
                cpus=rng.choice([0, 0.3, 4, 8]),
                gpus=rng.choice([0, 0.3, 1, 2]),
            )
            view = [
                NodeFree(node_id=free.ids[i], cpus=free.cpus[i], gpus=free.gpus[i])
                for i in range(len(free.ids))
            ]
            got = free.place(need)
            assert (None if got is None else [free.ids[i] for i in got]) == place_gang(need, view)
            if nodes and rng.random() < 0.5:  # a node's capacity moves (a give or a take)
                i = rng.randrange(len(nodes))
                free.set(i, cpus=rng.choice(levels) * 8, gpus=rng.choice(levels))
            elif got is not None:
                for i in dict.fromkeys(got):
                    n = got.count(i)
                    free.set(
                        i,
                        cpus=free.cpus[i] - n * need.cpus_per_worker,
                        gpus=free.gpus[i] - n * need.gpus_per_worker,
                    )
