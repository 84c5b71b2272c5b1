"""The fair-share owed account, advanced by the scheduler leader once a tick.

Each team row keeps ``owed_s`` (share-seconds it is owed; negative when it owes) as of
``owed_at``. Each tick the leader advances every team's account over the time since the last
advance with what the tick's snapshot shows each team holding, demanding and waiting for
(``policy.fairshare.advance_owed``, the function the simulator runs on its virtual clock:
it accrues only while the teams contend), and the next snapshot hands it to the policy
(``TeamState.owed_s``). On a mixed cluster each GPU type (and the CPUs) is shared out by
itself and a team's fair share is the largest of its parts (``fairshare.fair_dominant``):
two teams that each want only a different type are each owed all of it. A gap with no
leader, or with nothing queued or running, accrues at most ``MAX_STEP_S`` at the rates seen
when it ends.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from typing import NamedTuple

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.tables import Team
from service.policy.capacity import place_gang
from service.policy.fairshare import GpuTypes, advance_owed, dominant_share, resource_shares
from service.policy.queue_index import Shape, shape_of
from service.policy.snapshot import Snapshot


class _ShapeGang(NamedTuple):
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    accelerators: tuple[str, ...] = ()


__all__ = ["MAX_STEP_S", "advance", "shares"]

MAX_STEP_S = 300.0


class _Tally(NamedTuple):
    held: dict[str, float]
    demand: dict[str, float]
    waiting: set[str]
    demand_by: dict[str, dict[str | None, float]] | None  # mixed cluster: per resource
    types: GpuTypes | None


def shares(snap: Snapshot) -> tuple[dict[str, float], dict[str, float], set[str]]:
    """(held, demand) dominant shares per team, and the teams with work waiting: demand =
    held + queued jobs that fit the cluster (a job larger than the cluster is no demand on
    it, and does not make its team wait). The queued jobs are read per team and shape
    (``snap.index`` when the caller keeps one: no pass over the queue), and each sum is
    exact (``math.fsum``), so it does not depend on the order the jobs are added in. On a
    mixed cluster the GPUs are kept per type too (``GpuTypes.charge``: a running job's on
    its type, a queued one's spread over the types it accepts)."""
    t = _tally(snap)
    return t.held, t.demand, t.waiting


def _tally(snap: Snapshot) -> _Tally:
    """``shares``, and on a mixed cluster each team's demand of each resource
    (``fairshare.resource_shares``: the owed account shares out each type by itself)."""
    cpus = sum(n.cpus for n in snap.totals)
    gpus = sum(n.gpus for n in snap.totals)
    types = GpuTypes.of(snap.totals, snap.type_weights)
    held: dict[str, tuple[list[float], list[float]]] = {}
    demand: dict[str, tuple[list[float], list[float]]] = {}
    typed: dict[str, dict[str, dict[str, float]]] = {"held": {}, "demand": {}}  # team -> type
    waiting: set[str] = set()
    running = Counter((a.entry.team, shape_of(a.entry), a.accelerator) for a in snap.active)
    for (team, (workers, cpw, gpw, accepts), on), k in running.items():
        for name, to in (("held", held), ("demand", demand)):
            cs, gs = to.setdefault(team, ([], []))
            cs.append(k * workers * cpw)
            gs.append(k * workers * gpw)
            if types is not None:
                types.charge(typed[name].setdefault(team, {}), k * workers * gpw, on, accepts)
    fits: dict[Shape, bool] = {}
    for team, per_shape in _queued(snap).items():
        for shape, n in per_shape.items():
            if shape not in fits:
                fits[shape] = place_gang(_ShapeGang(*shape), snap.totals) is not None
            if fits[shape] and n > 0:
                cs, gs = demand.setdefault(team, ([], []))
                cs.append(n * shape[0] * shape[1])
                gs.append(n * shape[0] * shape[2])
                waiting.add(team)
                if types is not None:
                    into = typed["demand"].setdefault(team, {})
                    types.charge(into, n * shape[0] * shape[2], None, shape[3])

    def share(of: dict[str, tuple[list[float], list[float]]], name: str) -> dict[str, float]:
        per = typed[name]
        return {
            t: dominant_share(
                math.fsum(c),
                math.fsum(g),
                total_cpus=cpus,
                total_gpus=gpus,
                by_type=per.get(t),
                types=types,
            )
            for t, (c, g) in of.items()
        }

    demand_by = None
    if types is not None:
        per = typed["demand"]
        demand_by = {
            t: resource_shares(
                math.fsum(c), math.fsum(g), total_cpus=cpus, by_type=per.get(t), types=types
            )
            for t, (c, g) in demand.items()
        }
    return _Tally(share(held, "held"), share(demand, "demand"), waiting, demand_by, types)


def _queued(snap: Snapshot) -> Mapping[str, Mapping[Shape, int]]:
    """Team -> gang shape -> how many of its jobs are queued."""
    if snap.index is not None:
        return snap.index.team_shapes
    out: dict[str, Counter[Shape]] = {}
    for e in snap.queued:
        out.setdefault(e.team, Counter())[shape_of(e)] += 1
    return out


def advance(session: Session, *, snap: Snapshot, half_life_s: float) -> None:
    """Advance every team's account to ``snap.now`` (in the caller's fenced transaction)."""
    rows = list(session.execute(select(Team).with_for_update()).scalars())
    last = max((r.owed_at for r in rows if r.owed_at is not None), default=None)
    dt = 0.0
    if last is not None:
        if last.tzinfo is None:  # SQLite returns naive UTC
            last = last.replace(tzinfo=snap.now.tzinfo)
        dt = min(max((snap.now - last).total_seconds(), 0.0), MAX_STEP_S)
    t = _tally(snap)
    owed = advance_owed(
        {r.name: r.owed_s for r in rows},
        held=t.held,
        demand=t.demand,
        waiting=t.waiting,
        weights={r.name: r.weight for r in rows},
        dt_s=dt,
        half_life_s=half_life_s,
        demand_by=t.demand_by,
        types=t.types,
    )
    for r in rows:
        r.owed_s = owed.get(r.name, r.owed_s)
        r.owed_at = snap.now
