"""Elastic jobs (``resources.num_workers: {min, max}``): when to grow and shrink. Pure.

``decide(snapshot, plan)`` reads one ``policy.planner`` result (its starts, waits and
preemptions) and is the one resize decision: the simulator calls it after ``plan`` and acts
on what it returns (the live loop does not yet: the service refuses elastic specs until it
does; docs/scheduling.md, Elastic jobs). An elastic
job is queued at ``min`` workers (it starts when ``min`` fits) and runs at a width between
``min`` and ``max``; a resize is a checkpoint-now stop and a restart on the new width (the
checkpoint reshards: DDP and FSDP2 DCP shards), so no step is lost.

- **Shrink instead of preemption.** When the plan would preempt an elastic job holding more
  than ``min``, it shrinks it instead: to the widest width at which the job the preemption
  was for still fits (``min`` at most), keeping whole-job victims only where shrinking does
  not make room. The rules that chose the victims (priority, fair share, reservation) are
  the preemption's; a shrink only takes less.
- **Reclaim.** Workers above ``min`` are lent: they were taken while no job waited. When
  the first job waiting for resources would fit with them back, the fewest of them are
  taken back (jobs of a class not above the waiting job's; lowest class, then the youngest
  attempt first), whatever the preemption rules say.
- **Grow.** When no queued job waits for resources (none blocked, none held back behind a
  reservation; a job over its quota or larger than the cluster does not count), the
  capacity left free after the plan's starts goes to elastic jobs: those starting now
  (they start wider, ``RESIZE_START``), then running ones that have run ``min_runtime_s``
  in their attempt (so a job grows at most once per that interval), highest class first,
  then the longest running; each within its team's quota.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from service.policy.capacity import NodeFree, pack, place_gang, take
from service.policy.planner import Plan, WaitKind
from service.policy.preemption import Preemption
from service.policy.snapshot import ActiveJob, QueueEntry, Snapshot, TeamQuota
from shunter.jobspec.vocab import priority_rank

__all__ = [
    "RESIZE_GROW",
    "RESIZE_RECLAIM",
    "RESIZE_SHRINK",
    "RESIZE_START",
    "Resize",
    "Resizing",
    "decide",
    "valid_widths",
]

RESIZE_GROW = "grow"  # idle capacity and no job waiting for it
RESIZE_START = "start"  # starts wider than min: idle capacity and no job waiting for it
RESIZE_SHRINK = "shrink"  # instead of a preemption (cause in ``Resize.cause``)
RESIZE_RECLAIM = "reclaim"  # lent workers taken back for a waiting job


@dataclass(frozen=True, kw_only=True)
class Resize:
    """Run ``entry`` (running now, or starting with ``RESIZE_START``) on ``to`` workers."""

    entry: QueueEntry
    to: int
    kind: str  # RESIZE_*
    for_job: QueueEntry | None = None  # shrink / reclaim: the job it makes room for
    cause: str | None = None  # shrink: the preemption cause it replaces

    @property
    def job_id(self) -> str:
        return self.entry.job_id

    def reason(self) -> str:
        """The event's text."""
        w = f"{self.entry.num_workers} -> {self.to} workers"
        if self.kind == RESIZE_GROW:
            return f"grow {w}: capacity is idle and no job waits for it"
        if self.kind == RESIZE_START:
            return f"start on {self.to} workers (min {self.entry.min_workers}): capacity is idle"
        j = self.for_job.job_id if self.for_job is not None else "a waiting job"
        if self.kind == RESIZE_SHRINK:
            return f"shrink {w} instead of preemption ({self.cause}) for job {j}"
        return f"shrink {w}: lent workers taken back for job {j}"


def valid_widths(entry: QueueEntry) -> range:
    lo = entry.min_workers or entry.num_workers
    return range(lo, (entry.max_workers or entry.num_workers) + 1)


def _at(entry: QueueEntry, width: int) -> QueueEntry:
    return replace(entry, num_workers=width)


def _fits(job: QueueEntry, totals: Sequence[NodeFree], keep: Sequence[QueueEntry]) -> bool:
    return place_gang(job, pack(totals, keep)[0]) is not None


def _shrink_instead(
    preemptions: list[Preemption], active: Sequence[ActiveJob], totals: Sequence[NodeFree]
) -> tuple[list[Preemption], list[Resize]]:
    job = preemptions[0].for_job
    by_id = {p.victim.job_id: p for p in preemptions}
    elastic = [
        p.victim
        for p in preemptions
        if p.victim.elastic and p.victim.num_workers > (p.victim.min_workers or 0)
    ]
    if not elastic:
        return preemptions, []
    running = [a.entry for a in active if not a.preempting]
    width = {v.job_id: v.min_workers or v.num_workers for v in elastic}
    stop = {p.victim.job_id for p in preemptions if p.victim.job_id not in width}

    def keep() -> list[QueueEntry]:
        return [
            _at(e, width[e.job_id]) if e.job_id in width else e
            for e in running
            if e.job_id not in stop
        ]

    if not _fits(job, totals, keep()):
        return preemptions, []  # shrinking to min is not enough: the preemption stands
    for p in reversed(preemptions):  # whole-job victims no longer needed
        vid = p.victim.job_id
        if vid in stop:
            stop.discard(vid)
            if not _fits(job, totals, keep()):
                stop.add(vid)
    for v in reversed(elastic):  # as wide as the job still fits with
        while width[v.job_id] < v.num_workers:
            width[v.job_id] += 1
            if not _fits(job, totals, keep()):
                width[v.job_id] -= 1
                break
    resizes = [
        Resize(
            entry=v,
            to=width[v.job_id],
            kind=RESIZE_SHRINK,
            for_job=job,
            cause=by_id[v.job_id].cause,
        )
        for v in elastic
        if width[v.job_id] < v.num_workers
    ]
    return [p for p in preemptions if p.victim.job_id in stop], resizes


def _reclaim(
    job: QueueEntry, active: Sequence[ActiveJob], totals: Sequence[NodeFree]
) -> list[Resize]:
    running = [a for a in active if not a.preempting]
    entries = [a.entry for a in running]
    lent = sorted(
        (
            a
            for a in running
            if a.entry.elastic
            and a.entry.num_workers > (a.entry.min_workers or 0)
            and priority_rank(a.entry.priority) >= priority_rank(job.priority)
        ),
        key=lambda a: (-priority_rank(a.entry.priority), -a.started_at.timestamp(), a.entry.job_id),
    )
    if not lent:
        return []
    if len(running) < len(active) and _fits(job, totals, entries):
        return []  # what is stopping already makes room: wait for it
    width = {a.entry.job_id: a.entry.num_workers for a in lent}

    def keep() -> list[QueueEntry]:
        return [_at(e, width[e.job_id]) if e.job_id in width else e for e in entries]

    chosen: list[QueueEntry] = []
    for a in lent:
        width[a.entry.job_id] = a.entry.min_workers or a.entry.num_workers
        chosen.append(a.entry)
        if _fits(job, totals, keep()):
            break
    else:
        return []
    for v in reversed(chosen):
        while width[v.job_id] < v.num_workers:
            width[v.job_id] += 1
            if not _fits(job, totals, keep()):
                width[v.job_id] -= 1
                break
    return [
        Resize(entry=v, to=width[v.job_id], kind=RESIZE_RECLAIM, for_job=job)
        for v in chosen
        if width[v.job_id] < v.num_workers
    ]


def _within(
    quota: TeamQuota | None, held: tuple[float, float], extra_cpus: float, extra_gpus: float
) -> bool:
    if quota is None:
        return True
    if quota.max_gpus is not None and held[1] + extra_gpus > quota.max_gpus + 1e-9:
        return False
    return quota.max_cpus is None or held[0] + extra_cpus <= quota.max_cpus + 1e-9


def _grow(
    *,
    now: datetime,
    starts: Sequence[QueueEntry],
    active: Sequence[ActiveJob],
    free: list[NodeFree],
    held: Mapping[str, tuple[float, float]],
    quotas: Mapping[str, TeamQuota | None],
    min_runtime_s: float,
) -> list[Resize]:
    growing: list[tuple[QueueEntry, str]] = [
        (e, RESIZE_START)
        for e in sorted(starts, key=lambda e: e.order_key)
        if e.elastic and e.num_workers < (e.max_workers or 0)
    ]
    running = sorted(
        (
            a
            for a in active
            if not a.preempting
            and a.entry.elastic
            and a.entry.num_workers < (a.entry.max_workers or 0)
            and (now - a.started_at).total_seconds() >= min_runtime_s
        ),
        key=lambda a: (priority_rank(a.entry.priority), a.started_at, a.entry.job_id),
    )
    growing += [(a.entry, RESIZE_GROW) for a in running]
    out: list[Resize] = []
    teams = {t: list(h) for t, h in held.items()}
    for e, kind in growing:
        h = teams.setdefault(e.team, [0.0, 0.0])
        extra = (e.max_workers or e.num_workers) - e.num_workers
        while extra > 0:
            more = _at(e, extra)
            if _within(quotas.get(e.team), (h[0], h[1]), more.cpus, more.gpus):
                placement = place_gang(more, free)
                if placement is not None:
                    free = take(free, placement, more)
                    h[0] += more.cpus
                    h[1] += more.gpus
                    out.append(Resize(entry=e, to=e.num_workers + extra, kind=kind))
                    break
            extra -= 1
    return out


@dataclass(frozen=True, kw_only=True)
class Resizing:
    """A plan's preemptions (those a shrink replaces taken out) and its resizes."""

    preemptions: list[Preemption]
    resizes: list[Resize]


def decide(snap: Snapshot, p: Plan, *, min_runtime_s: float) -> Resizing:
    """THE resize decision: the live loop and the simulator call it on the same snapshot
    and plan (``policy.planner``'s), right after ``plan``, and act on what it returns."""
    starts = [d for d in p.decisions if d.start_now]
    if not any(a.entry.elastic for a in snap.active) and not any(d.entry.elastic for d in starts):
        return Resizing(preemptions=p.preemptions, resizes=[])  # no elastic job: no cost
    if p.preemptions:
        kept, shrinks = _shrink_instead(p.preemptions, snap.active, snap.totals)
        return Resizing(preemptions=kept, resizes=shrinks)
    blocked = [
        d.entry for d in p.decisions if d.wait is not None and d.wait.kind == WaitKind.RESOURCES
    ]
    if blocked:
        return Resizing(preemptions=[], resizes=_reclaim(blocked[0], snap.active, snap.totals))
    if p.deferred or any(d.wait is not None and d.wait.for_resources for d in p.decisions):
        return Resizing(preemptions=[], resizes=[])  # a job waits for capacity: no grow
    free = list(snap.free)
    held: dict[str, list[float]] = {}
    for e in [a.entry for a in snap.active] + [d.entry for d in starts]:
        h = held.setdefault(e.team, [0.0, 0.0])
        h[0] += e.cpus
        h[1] += e.gpus
    for d in starts:
        free = take(free, d.placement, d.entry)
    grows = _grow(
        now=snap.now,
        starts=[d.entry for d in starts],
        active=snap.active,
        free=free,
        held={t: (h[0], h[1]) for t, h in held.items()},
        quotas={t: s.quota for t, s in snap.teams.items()},
        min_runtime_s=min_runtime_s,
    )
    return Resizing(preemptions=[], resizes=grows)
