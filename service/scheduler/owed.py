"""The fair-share owed account, advanced by the scheduler leader once a tick.

Each team row keeps ``owed_s`` (share-seconds it is owed; negative when it owes) as of
``owed_at``. Each tick the leader advances every team's account over the time since the last
advance with what the tick's snapshot shows each team holding, demanding and waiting for
(``policy.fairshare.advance_owed``, the function the simulator runs on its virtual clock:
it accrues only while the teams contend), and the next snapshot hands it to the policy
(``TeamState.owed_s``). A gap with no leader, or with
nothing queued or running, accrues at most ``MAX_STEP_S`` at the rates seen when it ends.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.models import Team
from service.scheduler.policy.capacity import place_gang
from service.scheduler.policy.fairshare import advance_owed, dominant_share
from service.scheduler.policy.snapshot import QueueEntry, Snapshot

__all__ = ["MAX_STEP_S", "advance", "shares"]

MAX_STEP_S = 300.0


def shares(snap: Snapshot) -> tuple[dict[str, float], dict[str, float], set[str]]:
    """(held, demand) dominant shares per team, and the teams with work waiting: demand =
    held + queued jobs that fit the cluster (a job larger than the cluster is no demand on
    it, and does not make its team wait)."""
    cpus = sum(n.cpus for n in snap.totals)
    gpus = sum(n.gpus for n in snap.totals)
    held: dict[str, list[float]] = {}
    demand: dict[str, list[float]] = {}
    waiting: set[str] = set()

    def add(to: dict[str, list[float]], e: QueueEntry) -> None:
        c, g = to.setdefault(e.team, [0.0, 0.0])
        to[e.team] = [c + e.cpus, g + e.gpus]

    for a in snap.active:
        add(held, a.entry)
        add(demand, a.entry)
    for e in snap.queued:
        if place_gang(e, snap.totals) is not None:
            add(demand, e)
            waiting.add(e.team)

    def share(of: dict[str, list[float]]) -> dict[str, float]:
        return {
            t: dominant_share(c, g, total_cpus=cpus, total_gpus=gpus) for t, (c, g) in of.items()
        }

    return share(held), share(demand), waiting


def advance(session: Session, *, snap: Snapshot, half_life_s: float) -> None:
    """Advance every team's account to ``snap.now`` (in the caller's fenced transaction)."""
    rows = list(session.execute(select(Team).with_for_update()).scalars())
    last = max((r.owed_at for r in rows if r.owed_at is not None), default=None)
    dt = 0.0
    if last is not None:
        if last.tzinfo is None:  # SQLite returns naive UTC
            last = last.replace(tzinfo=snap.now.tzinfo)
        dt = min(max((snap.now - last).total_seconds(), 0.0), MAX_STEP_S)
    held, demand, waiting = shares(snap)
    owed = advance_owed(
        {r.name: r.owed_s for r in rows},
        held=held,
        demand=demand,
        waiting=waiting,
        weights={r.name: r.weight for r in rows},
        dt_s=dt,
        half_life_s=half_life_s,
    )
    for r in rows:
        r.owed_s = owed.get(r.name, r.owed_s)
        r.owed_at = snap.now
