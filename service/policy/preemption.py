"""Who to preempt, if anyone, so a blocked job can start. Pure; the loop asks the victims to
checkpoint now and stop (``service.jobs.checkpoint_now.request_preemption``).

A queued job J may preempt a running job V when V is preemptible, is not already stopping,
and either

- ``priority``: J's priority class is higher than V's (at once: V cannot preempt J back, so
  there is nothing to thrash); or
- ``fair share``: V has run at least ``min_runtime_s`` in its current attempt (two teams near
  their shares could otherwise trade the cluster back and forth), V's class is not higher,
  J's team would hold no more than its fair share with J running (``job_share``: J's
  dominant share; the fair share is the team's weight over the demanding teams' weights),
  J has waited at least ``grace_s``, and V's team
  holds more than its fair share.

Victims are taken lowest class first, then from the team most over its share, then the most
recently started (the least work lost), until J fits on the capacity they free together with
what is free now and what jobs already stopping will free. No victims if J would not fit
even then. Jobs already stopping count as freed: J waits for them before asking for more.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from service.policy.capacity import NodeFree, pack, place_gang
from service.policy.fairshare import GpuTypes
from service.policy.fairshare import job_share as _one_share
from service.policy.snapshot import ActiveJob, QueueEntry
from shunter.jobspec.vocab import priority_rank

__all__ = [
    "PREEMPT_FAIR_SHARE",
    "PREEMPT_PRIORITY",
    "PREEMPT_RESERVATION",
    "PreemptRules",
    "Preemption",
    "choose_victims",
    "reclaim_victims",
]

PREEMPT_PRIORITY = "priority"
PREEMPT_FAIR_SHARE = "fair share"
PREEMPT_RESERVATION = "reservation"


@dataclass(frozen=True, kw_only=True)
class Preemption:
    victim: QueueEntry
    for_job: QueueEntry
    cause: str  # PREEMPT_PRIORITY | PREEMPT_FAIR_SHARE


@dataclass(frozen=True, kw_only=True)
class PreemptRules:
    by_priority: bool = True
    by_fair_share: bool = True
    grace_s: float = 600.0
    min_runtime_s: float = 300.0
    # Preemptible jobs behind a reservation may borrow its capacity; they are stopped when
    # its start arrives (``reclaim_victims``). Off: strict EASY backfill.
    by_reservation: bool = True


def _cause(
    job: QueueEntry,
    victim: ActiveJob,
    *,
    now: datetime,
    rules: PreemptRules,
    shares: Mapping[str, float],
    fair: Mapping[str, float],
    job_share: float,
) -> str | None:
    v = victim.entry
    if (
        victim.preempting
        or not v.preemptible
        or (v.team == job.team and priority_rank(v.priority) <= priority_rank(job.priority))
    ):
        return None
    if rules.by_priority and priority_rank(v.priority) > priority_rank(job.priority):
        return PREEMPT_PRIORITY
    if (
        not rules.by_fair_share
        or priority_rank(v.priority) < priority_rank(job.priority)
        or v.team == job.team
    ):
        return None
    if (now - victim.started_at).total_seconds() < rules.min_runtime_s:
        return None
    waited = (now - job.waiting_since).total_seconds()
    # J's team stays within its share once J runs, so the victim's team, still above its
    # own, cannot preempt back: no ping-pong between two teams near their shares.
    within = shares.get(job.team, 0.0) + job_share <= fair.get(job.team, 0.0) + 1e-9
    above = shares.get(v.team, 0.0) > fair.get(v.team, 0.0)
    return PREEMPT_FAIR_SHARE if within and above and waited >= rules.grace_s else None


def _free_without(totals: Sequence[NodeFree], keep: Sequence[ActiveJob]) -> list[NodeFree]:
    return pack(totals, [a.entry for a in keep])[0]


def choose_victims(
    job: QueueEntry,
    *,
    now: datetime,
    active: Sequence[ActiveJob],
    totals: Sequence[NodeFree],
    shares: Mapping[str, float],
    fair: Mapping[str, float],
    rules: PreemptRules,
    job_share: float = 0.0,
    types: GpuTypes | None = None,
) -> list[Preemption]:
    """The fewest victims, in the order above, that let ``job`` start; [] if none do
    (``types``: a mixed cluster's, for the victims' shares per type)."""
    running = [a for a in active if not a.preempting]
    causes = {
        a.entry.job_id: c
        for a in running
        if (
            c := _cause(job, a, now=now, rules=rules, shares=shares, fair=fair, job_share=job_share)
        )
        is not None
    }
    if not causes:
        return []
    stopping = len(running) < len(active)
    if stopping and place_gang(job, _free_without(totals, running)) is not None:
        return []  # what is stopping already makes room: wait for it
    candidates = sorted(
        (a for a in running if a.entry.job_id in causes),
        key=lambda a: (
            -priority_rank(a.entry.priority),
            -(shares.get(a.entry.team, 0.0) - fair.get(a.entry.team, 0.0)),
            -a.started_at.timestamp(),
            a.entry.job_id,
        ),
    )
    cpus = sum(n.cpus for n in totals)
    gpus = sum(n.gpus for n in totals)
    # J's team's share once J runs, per unit of its fair share (fair is weight-proportional).
    j_after = (shares.get(job.team, 0.0) + job_share) / max(fair.get(job.team, 0.0), 1e-9)
    taken: dict[str, float] = {}  # share taken from each victim team so far
    chosen: list[ActiveJob] = []
    for a in candidates:
        v = a.entry
        if causes[v.job_id] == PREEMPT_FAIR_SHARE:
            # Kueue's LessThanOrEqualToFinalShare: the victim's team keeps at least J's
            # team's share (weight-normalised) after the stop, so a job much larger than J
            # (a gang that drained the cluster) is not stopped to run a small one, and the
            # two teams cannot trade places.
            v_share = _one_share(
                v.cpus,
                v.gpus,
                total_cpus=cpus,
                total_gpus=gpus,
                types=types,
                accelerator=a.accelerator,
                accepts=v.accelerators,
            )
            left = shares.get(v.team, 0.0) - taken.get(v.team, 0.0) - v_share
            if left / max(fair.get(v.team, 0.0), 1e-9) < j_after - 1e-9:
                continue
            taken[v.team] = taken.get(v.team, 0.0) + v_share
        chosen.append(a)
        ids = {c.entry.job_id for c in chosen}
        keep = [r for r in running if r.entry.job_id not in ids]
        if place_gang(job, _free_without(totals, keep)) is not None:
            return [
                Preemption(victim=c.entry, for_job=job, cause=causes[c.entry.job_id])
                for c in chosen
            ]
    return []


def reclaim_victims(
    job: QueueEntry,
    *,
    now: datetime,
    active: Sequence[ActiveJob],
    totals: Sequence[NodeFree],
    evictable: set[str],
    min_runtime_s: float,
) -> list[Preemption]:
    """The reservation holder ``job``'s start has come: the fewest of the ``evictable``
    running jobs (ids; borrowers behind it in order), lowest class first, then the most
    recently started (the least work lost), whose stop lets it fit; each has run
    ``min_runtime_s`` in its attempt (borrowing is refused that close to the start, so this
    delays the holder only if the start came early). [] if jobs already stopping make room,
    or if even all of them would not."""
    running = [a for a in active if not a.preempting]
    if len(running) < len(active) and place_gang(job, _free_without(totals, running)):
        return []  # what is stopping already makes room: wait for it
    candidates = sorted(
        (
            a
            for a in running
            if a.entry.job_id in evictable and (now - a.started_at).total_seconds() >= min_runtime_s
        ),
        key=lambda a: (-priority_rank(a.entry.priority), -a.started_at.timestamp(), a.entry.job_id),
    )
    chosen: set[str] = set()
    for a in candidates:
        chosen.add(a.entry.job_id)
        keep = [r for r in running if r.entry.job_id not in chosen]
        if place_gang(job, _free_without(totals, keep)) is not None:
            return [
                Preemption(victim=c.entry, for_job=job, cause=PREEMPT_RESERVATION)
                for c in candidates
                if c.entry.job_id in chosen
            ]
    return []
