"""The scheduling policy: one snapshot in, one plan out. Pure; ``snapshot.now`` is its clock.

The live loop (``service.scheduler.loop``), the ETA forward run (``policy.eta``) and the
trace simulator (``service.scheduler.sim``) all call ``plan``; ``PolicyConfig`` picks the
policy (``fair``, the default; ``priority``; ``fifo``).

One pass over the queue in policy order (``policy.order``: priority class, then the team's
weighted fair share, re-read after each placement, then waiting time):

1. A job that cannot fit the cluster even empty waits with that reason and blocks nobody.
2. A job over its team's quota waits; it blocks nobody either.
3. A job that fits now starts, unless a reservation is held for the first blocked job ahead
   of it and starting it would delay that one (``policy.reservations``: EASY backfill), or
   it is preemptible and borrows that capacity until the reserved start (``_borrows``).
4. The first job that does not fit gets the reservation; later ones wait behind it. Its start
   counts the borrowers as gone; when it comes, the fewest of them are preempted
   (``preemption.reclaim_victims``, cause ``reservation``).

Then preemption (``policy.preemption``) for the blocked jobs in order, one per plan: the
first for which some victims make room. Idle capacity is always lent: nothing is held back
except for a reservation with a known start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from service.scheduler.policy.capacity import NodeFree, never_fits_reason, place_gang, take
from service.scheduler.policy.fairshare import dominant_share, entitlements, fair_key
from service.scheduler.policy.order import in_policy_order, static_key
from service.scheduler.policy.preemption import (
    Preemption,
    PreemptRules,
    choose_victims,
    reclaim_victims,
)
from service.scheduler.policy.reservations import (
    Holder,
    Reservation,
    free_at,
    may_backfill,
    reserve,
)
from service.scheduler.policy.snapshot import (
    PRIORITY_RANK,
    ActiveJob,
    QueueEntry,
    Snapshot,
    TeamQuota,
    TeamState,
    TeamUsage,
)

__all__ = [
    "POLICIES",
    "PRIORITY_RANK",
    "NodeFree",
    "Plan",
    "PolicyConfig",
    "QueueDecision",
    "QueueEntry",
    "TeamQuota",
    "TeamUsage",
    "bound_end",
    "order_queue",
    "place_gang",
    "plan",
    "sort_key",
]

_WAITING = "waiting for resources"
POLICIES = ("fair", "priority", "fifo")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Preemption is tried for the first few blocked jobs in order (bounds the cost per tick).
_PREEMPT_CANDIDATES = 4


@dataclass(frozen=True, kw_only=True)
class PolicyConfig:
    use_priority: bool = True
    fair_share: bool = True
    reservations: bool = True
    preempt: PreemptRules = field(default_factory=PreemptRules)

    @classmethod
    def named(
        cls, name: str, *, grace_s: float = 600.0, min_runtime_s: float = 300.0
    ) -> PolicyConfig:
        """``fair`` (everything), ``priority`` (classes + priority preemption + reservations,
        no fair share) or ``fifo`` (submit order with backfill: the old queue, no priority)."""
        rules = PreemptRules(grace_s=grace_s, min_runtime_s=min_runtime_s)
        if name == "fair":
            return cls(preempt=rules)
        if name == "priority":
            return cls(fair_share=False, preempt=replace(rules, by_fair_share=False))
        if name == "fifo":
            off = replace(rules, by_priority=False, by_fair_share=False)
            return cls(use_priority=False, fair_share=False, reservations=False, preempt=off)
        raise ValueError(f"policy: unknown {name!r}; use one of {', '.join(POLICIES)}")


@dataclass(frozen=True, kw_only=True)
class QueueDecision:
    entry: QueueEntry
    position: int  # 1-based
    start_now: bool
    reason: str | None  # why it waits; None when start_now
    placement: list[str] = field(default_factory=list)  # node id per worker when start_now


@dataclass(frozen=True, kw_only=True)
class Plan:
    decisions: list[QueueDecision]  # every queued job, in policy order
    preemptions: list[Preemption] = field(default_factory=list)
    reservation: Reservation | None = None
    shares: dict[str, float] = field(default_factory=dict)  # dominant share held, after starts
    fair: dict[str, float] = field(default_factory=dict)  # each demanding team's fair share

    @property
    def starts(self) -> list[QueueDecision]:
        return [d for d in self.decisions if d.start_now]


def sort_key(entry: QueueEntry) -> tuple[int, datetime, str]:
    return static_key(entry, use_priority=True)


def bound_end(entry: QueueEntry, start: datetime) -> datetime | None:
    """When a job started at ``start`` must end by its own bound (rest of max_runtime)."""
    if entry.max_runtime_s is None:
        return None
    return start + timedelta(seconds=max(entry.max_runtime_s - entry.run_s, 0.0))


def _quota_reason(entry: QueueEntry, usage: TeamUsage, quota: TeamQuota | None) -> str | None:
    if quota is None:
        return None
    if quota.max_running_jobs is not None and usage.running_jobs + 1 > quota.max_running_jobs:
        return f"team quota: {usage.running_jobs}/{quota.max_running_jobs} jobs running"
    if quota.max_gpus is not None and usage.gpus + entry.gpus > quota.max_gpus:
        return f"team quota: needs {entry.gpus:g} GPUs, {usage.gpus:g}/{quota.max_gpus:g} in use"
    if quota.max_cpus is not None and usage.cpus + entry.cpus > quota.max_cpus:
        return f"team quota: needs {entry.cpus:g} CPUs, {usage.cpus:g}/{quota.max_cpus:g} in use"
    return None


def _held(active: Sequence[ActiveJob]) -> dict[str, TeamUsage]:
    usage: dict[str, TeamUsage] = {}
    for a in active:
        _add(usage, a.entry)
    return usage


def _add(usage: dict[str, TeamUsage], e: QueueEntry) -> None:
    u = usage.get(e.team, TeamUsage())
    usage[e.team] = TeamUsage(
        running_jobs=u.running_jobs + 1, cpus=u.cpus + e.cpus, gpus=u.gpus + e.gpus
    )


def _fmt(t: datetime | None) -> str:
    return (
        "not yet known (a running job has no step rate or max_runtime)"
        if t is None
        else (t.strftime("%Y-%m-%dT%H:%M:%SZ"))
    )


def plan(snap: Snapshot, cfg: PolicyConfig | None = None) -> Plan:
    """Decide which queued jobs start now, why the others wait, and whom to preempt."""
    cfg = cfg or PolicyConfig()
    total_cpus = sum(n.cpus for n in snap.totals)
    total_gpus = sum(n.gpus for n in snap.totals)
    usage = _held(snap.active)
    teams: Mapping[str, TeamState] = snap.teams

    # The order charges each team for its jobs already considered (placed or waiting for
    # resources), so positions interleave teams as their starts will; quotas read ``usage``.
    ordered = _held(snap.active)

    def share(team: str, of: Mapping[str, TeamUsage]) -> float:
        u = of.get(team, TeamUsage())
        return dominant_share(u.cpus, u.gpus, total_cpus=total_cpus, total_gpus=total_gpus)

    def team_key(team: str) -> tuple[float, float]:
        t = teams.get(team, TeamState())
        return fair_key(
            share=share(team, ordered), owed_s=t.owed_s, history=t.history_share, weight=t.weight
        )

    def key_without(a: ActiveJob) -> tuple[float, float]:
        """The fair key of ``a``'s team were ``a`` stopped and queued again."""
        u = ordered.get(a.entry.team, TeamUsage())
        t = teams.get(a.entry.team, TeamState())
        s = dominant_share(
            u.cpus - a.entry.cpus,
            u.gpus - a.entry.gpus,
            total_cpus=total_cpus,
            total_gpus=total_gpus,
        )
        return fair_key(share=s, owed_s=t.owed_s, history=t.history_share, weight=t.weight)

    def evictable(gang: QueueEntry) -> set[str]:
        """Running jobs the reservation holder may take its capacity back from: borrowers,
        i.e. preemptible, not of a higher class, started while it waited, and behind it in
        policy order as they were queued (their own waiting time: a job that went ahead of it
        fairly is not taken back; one stopped for it queues again behind it)."""
        if not cfg.preempt.by_reservation:
            return set()
        out: set[str] = set()
        for a in snap.active:
            v = a.entry
            if a.preempting or not v.preemptible or _rank(v) < _rank(gang):
                continue
            if a.started_at <= gang.waiting_since:  # it did not go ahead of the holder
                continue
            same = v.team == gang.team or not cfg.fair_share
            mine = (0.0, 0.0) if same else key_without(a)
            theirs = (0.0, 0.0) if same else team_key(gang.team)
            # Behind it in order, as it was queued (its own waiting time, not a new one).
            behind = _rank(v) > _rank(gang) or (mine, v.waiting_since, v.job_id) > (
                theirs,
                gang.waiting_since,
                gang.job_id,
            )
            if behind:
                out.add(v.job_id)
        return out

    free = list(snap.free)
    holders = [Holder(entry=a.entry, end_at=a.expected_end_at) for a in snap.active]
    reservation: Reservation | None = None
    evict: set[str] = set()  # running jobs the reservation may take back (see ``evictable``)
    delay_reason = ""  # set with the reservation (formatted once per plan)
    out: list[QueueDecision] = []
    blocked: list[QueueEntry] = []
    order = in_policy_order(
        snap.queued, use_priority=cfg.use_priority, team_key=team_key if cfg.fair_share else None
    )
    as_nodes = _AsNodes.of(snap.totals)
    never: dict[tuple[int, float, float], str | None] = {}
    full: set[tuple[int, float, float]] = set()  # shapes that did not fit: free only shrinks
    for pos, entry in enumerate(order, start=1):
        shape = (entry.num_workers, entry.cpus_per_worker, entry.gpus_per_worker)
        if shape not in never:
            never[shape] = never_fits_reason(entry, as_nodes)
        reason = never[shape]
        if reason is None:
            team = teams.get(entry.team, TeamState())
            reason = _quota_reason(entry, usage.get(entry.team, TeamUsage()), team.quota)
        placement = None
        if reason is None and shape not in full:
            placement = place_gang(entry, free)
            if placement is None:
                full.add(shape)
        end = bound_end(entry, snap.now)
        if placement is not None and reservation is not None:
            ok = may_backfill(
                entry, end_at=end, reservation=reservation, totals=snap.totals, holders=holders
            ) or _borrows(entry, reservation, now=snap.now, rules=cfg.preempt)
            if not ok:
                placement = None
                reason = delay_reason
        if placement is None and reason is None:
            reason = (
                f"{_WAITING}: needs {entry.num_workers} x "
                f"({entry.cpus_per_worker:g} CPU, {entry.gpus_per_worker:g} GPU) at once"
            )
            blocked.append(entry)
            if cfg.reservations and reservation is None:
                evict = evictable(entry)
                reservation = _reserve(entry, snap, holders, evict)
                start_text = _fmt(reservation.start_at)
                reason += f"; reserved: expected to start {start_text}"
                delay_reason = (
                    f"{_WAITING}: would delay {entry.job_id}, which holds a reservation from "
                    f"{start_text}"
                )
        if placement is not None or (reason or "").startswith(_WAITING):
            _add(ordered, entry)
        if placement is not None:
            free = take(free, placement, entry)
            holders.append(Holder(entry=entry, end_at=end))
            _add(usage, entry)
        out.append(
            QueueDecision(
                entry=entry,
                position=pos,
                start_now=placement is not None,
                reason=None if placement is not None else reason,
                placement=placement or [],
            )
        )
    demanding = {e.team for e in snap.queued} | {a.entry.team for a in snap.active}
    fair = entitlements({t: teams.get(t, TeamState()).weight for t in sorted(demanding)})
    shares = {t: share(t, usage) for t in sorted(demanding)}
    reclaimed: list[Preemption] = []
    if reservation is not None and reservation.start_at == snap.now and evict:
        reclaimed = reclaim_victims(
            reservation.entry,
            now=snap.now,
            active=snap.active,
            totals=snap.totals,
            evictable=evict,
            min_runtime_s=cfg.preempt.min_runtime_s,
        )
    return Plan(
        decisions=_note_skips(out),
        # With a reservation, only its holder may preempt: any other job that made room
        # would still be held back by the reservation, and its victims stopped for nothing.
        preemptions=reclaimed
        or _preempt(snap, cfg, blocked[:1] if reservation else blocked, shares, fair),
        reservation=reservation,
        shares=shares,
        fair=fair,
    )


def _rank(e: QueueEntry) -> int:
    return PRIORITY_RANK.get(e.priority, 1)


def _reserve(
    entry: QueueEntry, snap: Snapshot, holders: Sequence[Holder], evict: set[str]
) -> Reservation:
    """The reservation's start: the earliest time ``entry`` fits once the running jobs it
    may not take back (``evict``) end at their expected ends; jobs already stopping count
    as gone. ``now`` when it fits once the evictable ones stop: the loop then stops them."""
    stopping = {a.entry.job_id for a in snap.active if a.preempting}
    if not (evict or stopping):
        return reserve(entry, now=snap.now, totals=snap.totals, holders=holders)
    firm = [
        Holder(entry=h.entry, end_at=snap.now) if h.entry.job_id in stopping else h
        for h in holders
        if h.entry.job_id not in evict
    ]
    if place_gang(entry, free_at(snap.totals, firm, snap.now)) is not None:
        return Reservation(entry=entry, start_at=snap.now, holders_ending=len(stopping))
    return reserve(entry, now=snap.now, totals=snap.totals, holders=firm)


def _borrows(
    entry: QueueEntry, reservation: Reservation, *, now: datetime, rules: PreemptRules
) -> bool:
    """A preemptible job not of a higher class than the reservation holder may use its
    capacity until the reservation's start (then ``reclaim_victims`` stops it); not within
    ``min_runtime_s`` of that start, so nothing is started only to be stopped at once."""
    start = reservation.start_at
    return (
        rules.by_reservation
        and entry.preemptible
        and _rank(entry) >= _rank(reservation.entry)
        and (start is None or (start - now).total_seconds() >= rules.min_runtime_s)
    )


def _preempt(
    snap: Snapshot,
    cfg: PolicyConfig,
    blocked: Sequence[QueueEntry],
    shares: Mapping[str, float],
    fair: Mapping[str, float],
) -> list[Preemption]:
    if not (cfg.preempt.by_priority or cfg.preempt.by_fair_share):
        return []
    cpus = sum(n.cpus for n in snap.totals)
    gpus = sum(n.gpus for n in snap.totals)
    for job in blocked[:_PREEMPT_CANDIDATES]:
        victims = choose_victims(
            job,
            now=snap.now,
            active=snap.active,
            totals=snap.totals,
            shares=shares,
            fair=fair,
            rules=cfg.preempt,
            job_share=dominant_share(job.cpus, job.gpus, total_cpus=cpus, total_gpus=gpus),
        )
        if victims:
            return victims
    return []


@dataclass(frozen=True, kw_only=True)
class _AsNodes:
    """Node totals as the ``capacity.NodeCapacity`` shape (alive, free = total)."""

    node_id: str
    total_cpus: float
    total_gpus: float
    alive: bool = True

    @property
    def free_cpus(self) -> float:
        return self.total_cpus

    @property
    def free_gpus(self) -> float:
        return self.total_gpus

    @staticmethod
    def of(nodes: Sequence[NodeFree]) -> list[_AsNodes]:
        return [_AsNodes(node_id=n.node_id, total_cpus=n.cpus, total_gpus=n.gpus) for n in nodes]


def order_queue(
    entries: Sequence[QueueEntry],
    nodes: Sequence[NodeFree],
    *,
    usage: Mapping[str, TeamUsage] | None = None,
    quotas: Mapping[str, TeamQuota] | None = None,
) -> list[QueueDecision]:
    """Priority-then-age order with backfill over free ``nodes``, quotas checked against
    ``usage``; no fair share, reservations or preemption. Kept for the queue page."""
    held = [
        ActiveJob(
            entry=QueueEntry(
                job_id=f"held-{team}-{i}",
                team=team,
                priority="normal",
                created_at=_EPOCH,
                num_workers=1,
                cpus_per_worker=u.cpus / u.running_jobs,
                gpus_per_worker=u.gpus / u.running_jobs,
            ),
            started_at=_EPOCH,
        )
        for team, u in (usage or {}).items()
        for i in range(u.running_jobs)
    ]
    snap = Snapshot(
        now=_EPOCH,
        # Totals unknown here: an unbounded node, so no job is "never fits" by this view.
        totals=[NodeFree(node_id="unbounded", cpus=math.inf, gpus=math.inf)],
        free=list(nodes),
        queued=list(entries),
        active=held,
        teams={t: TeamState(quota=q) for t, q in (quotas or {}).items()},
    )
    off = PreemptRules(by_priority=False, by_fair_share=False)
    return plan(snap, PolicyConfig(fair_share=False, reservations=False, preempt=off)).decisions


def _note_skips(decisions: list[QueueDecision]) -> list[QueueDecision]:
    """On each job waiting for resources, name the job behind it that starts instead."""
    out = list(decisions)
    behind: list[str] = []  # ids of starting jobs after position i, nearest last
    for i in range(len(decisions) - 1, -1, -1):
        d = decisions[i]
        if d.start_now:
            behind.append(d.entry.job_id)
            continue
        if behind and (d.reason or "").startswith(_WAITING):
            more = f" (+{len(behind) - 1} more)" if len(behind) > 1 else ""
            note = f"skipped for now: {behind[-1]}{more}, behind it, fits and starts"
            out[i] = replace(d, reason=f"{d.reason}; {note}")
    return out
