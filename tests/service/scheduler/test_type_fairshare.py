"""Fair share per accelerator type (issue 30): on a mixed cluster a team's share is the
largest of its shares of each type (GPUs held of it / its GPUs, x its weight / the largest
weight), not its GPUs over all GPUs. ``fairshare.dominant_share`` computes it for every
caller; a cluster of one type decides as before."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from service.db.tables import Team
from service.policy.capacity import NodeFree
from service.policy.fairshare import GpuTypes, RunInterval, decayed_average, dominant_share
from service.policy.planner import PolicyConfig, plan
from service.policy.snapshot import ActiveJob, Snapshot
from service.scheduler import owed
from tests.service.scheduler.policy_helpers import at, job

A100, H100 = "a100", "h100"
# One A100 node and three H100 nodes, 8 GPUs each: 8 A100s, 24 H100s.
TOTALS = [
    NodeFree(node_id="a", cpus=64, gpus=8, accelerator=A100),
    *(NodeFree(node_id=f"h{i}", cpus=64, gpus=8, accelerator=H100) for i in range(3)),
]


def _running(job_id: str, team: str, gpus: float, on: str) -> ActiveJob:
    e = replace(job(job_id, team=team, gpus=gpus), accelerators=(on,))
    return ActiveJob(entry=e, started_at=at(0), accelerator=on)


def _contended(weights: dict[str, float] | None = None) -> Snapshot:
    """a holds 6 of the 8 A100s (pooled 6/32, per type 6/8), b 12 of the 24 H100s (pooled
    12/32, per type 12/24), c 11 H100s; one H100 is free and a and b each want it."""
    active = [
        _running("ra", "a", 6, A100),
        _running("rb", "b", 12, H100),
        _running("rc", "c", 11, H100),
    ]
    free = [
        replace(TOTALS[0], cpus=63, gpus=2),
        replace(TOTALS[1], cpus=62, gpus=0),
        replace(TOTALS[2], cpus=63, gpus=0),
        replace(TOTALS[3], cpus=64, gpus=1),
    ]
    queued = [
        replace(job("qa", team="a", gpus=1, t=0), accelerators=(H100,)),
        replace(job("qb", team="b", gpus=1, t=10), accelerators=(H100,)),
    ]
    return Snapshot(
        now=at(60),
        totals=TOTALS,
        free=free,
        queued=queued,
        active=active,
        type_weights=weights,
    )


def test_the_share_is_per_type_and_weighted() -> None:
    types = GpuTypes.of(TOTALS)
    assert types is not None
    kw = {"total_cpus": 256.0, "total_gpus": 32.0, "types": types}
    # 6 A100s of 8 weigh more than 12 H100s of 24, whatever the pooled counts say.
    assert dominant_share(0, 6, by_type={A100: 6}, **kw) == 0.75
    assert dominant_share(0, 12, by_type={H100: 12}, **kw) == 0.5
    assert dominant_share(0, 6, total_cpus=256, total_gpus=32) == 6 / 32
    # GPUs of no known type (a job queued for any type) count as pooled on every type.
    assert dominant_share(0, 4, **kw) == pytest.approx(4 / 32)
    spread: dict[str, float] = {}
    types.charge(spread, 4, None, ())
    assert spread == pytest.approx({A100: 1.0, H100: 3.0})
    assert dominant_share(0, 4, by_type=spread, **kw) == pytest.approx(4 / 32)
    # An H100 of weight 4: an A100 counts a quarter of one.
    heavy = GpuTypes.of(TOTALS, {H100: 4.0})
    assert heavy is not None and heavy.scale == {A100: 0.25, H100: 1.0}
    assert dominant_share(0, 6, by_type={A100: 6}, **(kw | {"types": heavy})) == 0.1875
    # One type only (or none): no per-type shares, the pooled share as before.
    assert GpuTypes.of(TOTALS[1:]) is None
    assert GpuTypes.of([NodeFree(node_id="x", cpus=8, gpus=8)]) is None


def test_per_type_share_orders_teams_unlike_pooled_gpu_counts() -> None:
    """Pooled, a (6/32) is below b (12/32) and would take the free H100; per type a holds
    three quarters of the A100s, more than b's half of the H100s, so b goes first."""
    p = plan(_contended(), PolicyConfig())
    assert [d.entry.job_id for d in p.starts] == ["qb"]
    assert p.shares["a"] == 0.75 and p.shares["b"] == pytest.approx(13 / 24)


def test_type_weights_make_the_cheap_type_count_less() -> None:
    """With an H100 weighing 4 A100s, a's 6 A100s count 0.1875: below b's 0.5, a goes first."""
    p = plan(_contended({H100: 4.0}), PolicyConfig())
    assert [d.entry.job_id for d in p.starts] == ["qa"]


def test_owed_account_reads_the_same_shares() -> None:
    held, demand, waiting = owed.shares(_contended())
    assert held == pytest.approx({"a": 0.75, "b": 0.5, "c": 11 / 24})
    # The queued H100 job adds 1/24 to its team's H100 share.
    assert demand == pytest.approx({"a": 0.75, "b": 13 / 24, "c": 11 / 24})
    assert waiting == {"a", "b"}


def test_usage_history_is_kept_per_type() -> None:
    ivs = [
        RunInterval(start_s=-1e9, end_s=None, cpus=1, gpus=6, accelerator=A100),
        RunInterval(start_s=-1e9, end_s=None, cpus=1, gpus=6, accelerator=H100),
    ]
    by: dict[str, float] = {}
    cpus, gpus = decayed_average(ivs, now_s=0, half_life_s=3600, by_type=by)
    assert by == pytest.approx({A100: 6, H100: 6}) and gpus == pytest.approx(12)
    types = GpuTypes.of(TOTALS)
    share = dominant_share(cpus, gpus, total_cpus=256, total_gpus=32, by_type=by, types=types)
    assert share == pytest.approx(0.75)  # pooled: 12 / 32


def _each_holds_a_type(b_wants_an_a100: bool) -> Snapshot:
    """a holds all 8 A100s, b all 24 H100s; each has a 1-GPU job queued on its own type
    (and, with ``b_wants_an_a100``, b one on an A100 too)."""
    queued = [
        replace(job("qa", team="a", gpus=1, t=0), accelerators=(A100,)),
        replace(job("qb", team="b", gpus=1, t=10), accelerators=(H100,)),
    ]
    if b_wants_an_a100:
        queued.append(replace(job("qb2", team="b", gpus=1, t=20), accelerators=(A100,)))
    return Snapshot(
        now=at(100),
        totals=TOTALS,
        free=[replace(n, cpus=n.cpus - 1, gpus=0) for n in TOTALS],
        queued=queued,
        active=[
            _running("ra", "a", 8, A100),
            *(_running(f"rb{i}", "b", 8, H100) for i in range(3)),
        ],
    )


def _owed_after(snap: Snapshot, *, dt_s: float) -> dict[str, float]:
    """Each team's account after one ``owed.advance`` of ``dt_s`` from 0 (no decay to
    speak of), on a SQLite database of its own."""
    engine = create_engine("sqlite://")
    Team.__table__.create(engine)  # type: ignore[attr-defined]
    then = snap.now - timedelta(seconds=dt_s)
    with Session(engine) as s:
        s.add_all([Team(name=t, weight=1.0, owed_s=0.0, owed_at=then) for t in ("a", "b")])
        s.flush()
        owed.advance(s, snap=snap, half_life_s=1e15)
        return {t.name: t.owed_s for t in s.query(Team)}


def test_owed_account_shares_out_each_type_by_itself() -> None:
    """Each team holding all of a type the other does not want is owed nothing and owes
    nothing: per type each gets all it holds. One capacity of 1.0 for every type made both
    look over a half (fair 0.5, held 1.0): each owed -0.5 share-seconds a second."""
    assert _owed_after(_each_holds_a_type(False), dt_s=100) == pytest.approx(
        {"a": 0.0, "b": 0.0}, abs=1e-9
    )
    # b wants an A100 as well: the A100s are shared out between a (9/8 wanted) and b (1/8),
    # b gets its 1/8 and a 7/8 while holding all 8, so a owes 1/8 a second; b's fair share
    # is all the H100s, which it holds.
    assert _owed_after(_each_holds_a_type(True), dt_s=100) == pytest.approx(
        {"a": -12.5, "b": 0.0}, abs=1e-6
    )
