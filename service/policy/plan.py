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

A waiting job's reason is a typed ``Wait`` (``WaitKind``); the pass steers by the kind and
the text for people is written only when read (``QueueDecision.reason``). One pass is a
``_Pass``; ``max_depth`` bounds it (live: ``SHUNTER_SCHEDULER_MAX_PLAN_DEPTH``), and
``complete=False`` (the simulator) stops it once no later job could start.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum

from service.policy.capacity import NodeFree, never_fits_reason, place_gang, take
from service.policy.fairshare import HORIZON_S, dominant_share, entitlements, fair_key
from service.policy.order import PolicyOrder, in_policy_order
from service.policy.preemption import (
    Preemption,
    PreemptRules,
    choose_victims,
    reclaim_victims,
)
from service.policy.queue_index import QueueIndex, Shape, shape_of
from service.policy.reservations import (
    Holder,
    Reservation,
    StartView,
    free_at,
    reserve,
)
from service.policy.snapshot import (
    PRIORITY_RANK,
    ActiveJob,
    QueueEntry,
    Snapshot,
    TeamQuota,
    TeamState,
    TeamUsage,
)
from shunter.jobspec.vocab import priority_rank

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
    "Wait",
    "WaitKind",
    "bound_end",
    "place_gang",
    "plan",
]

POLICIES = ("fair", "priority", "fifo")
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


class WaitKind(StrEnum):
    NEVER_FITS = "never_fits"  # larger than the cluster even empty: blocks nobody
    QUOTA = "quota"  # over its team's quota: blocks nobody
    RESOURCES = "resources"  # does not fit now (the first such job may hold the reservation)
    BEHIND_RESERVATION = "behind_reservation"  # fits, but would delay the reservation holder


@dataclass(frozen=True, kw_only=True)
class Wait:
    """Why a queued job waits: a typed value; ``text()`` writes it for people."""

    kind: WaitKind
    entry: QueueEntry
    detail: str = ""  # NEVER_FITS, QUOTA: the sentence
    reserved: bool = False  # RESOURCES: this job holds the reservation
    reservation: Reservation | None = None  # RESOURCES reserved, BEHIND_RESERVATION
    skipped_for: tuple[str, ...] = ()  # starting jobs behind it, nearest first

    @property
    def for_resources(self) -> bool:
        """Waiting for capacity (charged in the order, may be skipped by a job behind)."""
        return self.kind in (WaitKind.RESOURCES, WaitKind.BEHIND_RESERVATION)

    def text(self) -> str:
        e = self.entry
        if self.kind in (WaitKind.NEVER_FITS, WaitKind.QUOTA):
            return self.detail
        r = self.reservation
        start = _fmt(r.start_at) if r is not None else ""
        if self.kind == WaitKind.BEHIND_RESERVATION:
            assert r is not None
            out = (
                f"waiting for resources: would delay {r.entry.job_id}, which holds a "
                f"reservation from {start}"
            )
        else:
            out = (
                f"waiting for resources: needs {e.num_workers} x "
                f"({e.cpus_per_worker:g} CPU, {e.gpus_per_worker:g} GPU) at once"
            )
            if self.reserved:
                out += f"; reserved: expected to start {start}"
        if self.skipped_for:
            n = len(self.skipped_for)
            more = f" (+{n - 1} more)" if n > 1 else ""
            out += f"; skipped for now: {self.skipped_for[0]}{more}, behind it, fits and starts"
        return out


@dataclass(frozen=True, kw_only=True)
class QueueDecision:
    entry: QueueEntry
    position: int  # 1-based
    start_now: bool
    wait: Wait | None = None  # why it waits; None when start_now
    placement: list[str] = field(default_factory=list)  # node id per worker when start_now

    @property
    def reason(self) -> str | None:
        """Why it waits, for people; None when it starts."""
        return None if self.wait is None else self.wait.text()


@dataclass(frozen=True, kw_only=True)
class Plan:
    decisions: list[QueueDecision]  # the queued jobs considered, in policy order
    preemptions: list[Preemption] = field(default_factory=list)
    reservation: Reservation | None = None
    shares: dict[str, float] = field(default_factory=dict)  # dominant share held, after starts
    fair: dict[str, float] = field(default_factory=dict)  # each demanding team's fair share
    # Queued jobs not considered (past ``max_depth``, or after nothing more could start with
    # ``complete=False``): they keep their last position, reason and ETA, marked stale.
    deferred: int = 0
    # With ``order_depth``: the jobs after the last one decided, in the order the complete
    # pass would consider them (none of them could start; past ``max_depth``, approximately),
    # those that never fit left out: the ETA forward run reads this order.
    rest: list[QueueEntry] = field(default_factory=list)

    def in_order(self) -> list[QueueEntry]:
        """The queued jobs in policy order, decided then ``rest``, never-fits left out."""
        decided = [
            d.entry for d in self.decisions if d.wait is None or d.wait.kind != WaitKind.NEVER_FITS
        ]
        return decided + self.rest

    @property
    def starts(self) -> list[QueueDecision]:
        return [d for d in self.decisions if d.start_now]


def bound_end(entry: QueueEntry, start: datetime) -> datetime | None:
    """When a job started at ``start`` must end by its own bound (rest of max_runtime)."""
    if entry.max_runtime_s is None:
        return None
    return start + timedelta(seconds=max(entry.max_runtime_s - entry.run_s, 0.0))


class _Tally:
    """What a team holds, as ``TeamUsage`` reads, counted in place (one pass adds often)."""

    __slots__ = ("cpus", "gpus", "running_jobs")

    def __init__(self) -> None:
        self.running_jobs, self.cpus, self.gpus = 0, 0.0, 0.0


def _quota_reason(
    entry: QueueEntry, usage: TeamUsage | _Tally, quota: TeamQuota | None
) -> str | None:
    if quota is None:
        return None
    if quota.max_running_jobs is not None and usage.running_jobs + 1 > quota.max_running_jobs:
        return f"team quota: {usage.running_jobs}/{quota.max_running_jobs} jobs running"
    if quota.max_gpus is not None and usage.gpus + entry.gpus > quota.max_gpus:
        return f"team quota: needs {entry.gpus:g} GPUs, {usage.gpus:g}/{quota.max_gpus:g} in use"
    if quota.max_cpus is not None and usage.cpus + entry.cpus > quota.max_cpus:
        return f"team quota: needs {entry.cpus:g} CPUs, {usage.cpus:g}/{quota.max_cpus:g} in use"
    return None


def _held(snap: Snapshot) -> dict[str, _Tally]:
    """Per team what its running jobs hold: the snapshot's tallies when it keeps them."""
    usage: dict[str, _Tally] = {}
    if snap.held is not None:
        for team, (jobs, cpus, gpus) in snap.held.items():
            if jobs:
                u = usage[team] = _Tally()
                u.running_jobs, u.cpus, u.gpus = jobs, cpus, gpus
        return usage
    for a in snap.active:
        _add(usage, a.entry)
    return usage


def _add(usage: dict[str, _Tally], e: QueueEntry) -> None:
    u = usage.get(e.team)
    if u is None:
        u = usage[e.team] = _Tally()
    u.running_jobs += 1
    u.cpus += e.num_workers * e.cpus_per_worker
    u.gpus += e.num_workers * e.gpus_per_worker


def _fmt(t: datetime | None) -> str:
    return (
        "not yet known (a running job has no step rate or max_runtime)"
        if t is None
        else (t.strftime("%Y-%m-%dT%H:%M:%SZ"))
    )


_shape = shape_of


@dataclass(frozen=True)
class _ShapeGang:
    """A gang shape as ``capacity.Gang`` (never-fits reasons depend on the shape only)."""

    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float


def plan(
    snap: Snapshot,
    cfg: PolicyConfig | None = None,
    *,
    max_depth: int | None = None,
    complete: bool = True,
    order_depth: int | None = 0,
) -> Plan:
    """Decide which queued jobs start now, why the others wait, and whom to preempt.

    ``max_depth``: consider only the first jobs in policy order (Slurm's
    ``bf_max_job_test``); the rest wait this tick and are counted in ``Plan.deferred``.
    ``complete=False`` (the simulator): stop once no later job could start (every shape
    still queued has failed to fit) and the preemption candidates are known; the starts,
    reservation and preemptions are the same as the complete pass's. ``order_depth`` (with
    ``complete=False``): then carry on ordering, without deciding, the jobs up to that
    position (None: all) in ``Plan.rest``: the complete pass's order at the cost of an
    order, not of a decision, per job (the ETA forward run needs only the order)."""
    return _Pass(snap, cfg or PolicyConfig()).run(
        max_depth=max_depth, complete=complete, order_depth=order_depth
    )


class _Pass:
    """One pass over the queue in policy order (the module docstring's steps 1-4)."""

    def __init__(self, snap: Snapshot, cfg: PolicyConfig) -> None:
        self.snap, self.cfg = snap, cfg
        # Cluster totals, once per plan.
        self.total_cpus = sum(n.cpus for n in snap.totals)
        self.total_gpus = sum(n.gpus for n in snap.totals)
        self.teams: Mapping[str, TeamState] = snap.teams
        self.team_consts: dict[str, tuple[float, float, float]] = {}  # owed, weight, hist/w
        self.usage = _held(snap)  # what each team holds (quotas read it)
        # The order charges each team for its jobs already considered (placed or waiting
        # for resources), so positions interleave teams as their starts will.
        self.ordered = _held(snap)
        self.free = list(snap.free)
        self._holders: list[Holder] | None = None  # built when a reservation needs them
        self.started: list[Holder] = []
        self.reservation: Reservation | None = None
        self.at_start: StartView | None = None  # capacity at the reservation's start
        self.evict: set[str] = set()  # running jobs the reservation may take back
        self.blocked: list[QueueEntry] = []
        self._as_nodes: list[_AsNodes] | None = None
        # Never-fits reasons by shape: the caller's, kept across plans while the totals stay
        # (the simulator), else this plan's own.
        self.never: dict[Shape, str | None] = snap.never_fits if snap.never_fits is not None else {}
        self.full: set[Shape] = set()  # shapes that did not fit: free only shrinks
        # Shapes no later job can start with this pass: full, never fit, or held back by the
        # reservation for every job of that shape still queued (``_held_back``).
        self.dead: set[Shape] = set()
        self.alive: set[Shape] = set()  # shapes with jobs left to consider, not dead
        # The queue per team in static order and per shape (kept across ticks by the
        # simulator; built here otherwise).
        idx = snap.index
        if idx is None or idx.use_priority != cfg.use_priority:
            idx = QueueIndex.build(snap.queued, use_priority=cfg.use_priority)
        self.index = idx
        # Jobs considered so far, per shape how many preemptible, and per shape the first
        # position in its ascending bounds not yet considered (``_held_back``).
        self.considered: set[str] = set()
        self.seen_preemptible: Counter[Shape] = Counter()
        self.first_left: dict[Shape, int] = {}
        self.fits: dict[Shape, list[str]] = {}  # shape -> placement on ``free`` as it is

    @property
    def holders(self) -> list[Holder]:
        """The running jobs and those started by this pass, with their expected ends."""
        if self._holders is None:
            self._holders = [
                Holder(entry=a.entry, end_at=a.expected_end_at) for a in self.snap.active
            ] + self.started
        return self._holders

    def as_nodes(self) -> list[_AsNodes]:
        if self._as_nodes is None:
            self._as_nodes = _AsNodes.of(self.snap.totals)
        return self._as_nodes

    # -- fair share -----------------------------------------------------------------------
    def share(self, team: str, of: Mapping[str, _Tally]) -> float:
        u = of.get(team) or _Tally()
        return dominant_share(
            u.cpus, u.gpus, total_cpus=self.total_cpus, total_gpus=self.total_gpus
        )

    def team_key(self, team: str) -> tuple[float, float]:
        """``fair_key`` of the team's share as ordered so far; the same floats, computed
        inline (the order reads it once per job)."""
        c = self.team_consts.get(team)
        if c is None:
            t = self.teams.get(team, TeamState())
            c = self.team_consts[team] = (t.owed_s, t.weight, t.history_share / t.weight)
        u = self.ordered.get(team)
        s = 0.0
        if u is not None:
            tg, tc = self.total_gpus, self.total_cpus
            if tg > 0 and u.gpus / tg > s:
                s = u.gpus / tg
            if tc > 0 and u.cpus / tc > s:
                s = u.cpus / tc
        return ((s * HORIZON_S - c[0]) / c[1], c[2])

    def key_without(self, a: ActiveJob) -> tuple[float, float]:
        """The fair key of ``a``'s team were ``a`` stopped and queued again."""
        u = self.ordered.get(a.entry.team) or _Tally()
        t = self.teams.get(a.entry.team, TeamState())
        s = dominant_share(
            u.cpus - a.entry.cpus,
            u.gpus - a.entry.gpus,
            total_cpus=self.total_cpus,
            total_gpus=self.total_gpus,
        )
        return fair_key(share=s, owed_s=t.owed_s, history=t.history_share, weight=t.weight)

    def evictable(self, gang: QueueEntry) -> set[str]:
        """Running jobs the reservation holder may take its capacity back from: borrowers,
        i.e. preemptible, not of a higher class, started while it waited, and behind it in
        policy order as they were queued (their own waiting time: a job that went ahead of it
        fairly is not taken back; one stopped for it queues again behind it)."""
        if not self.cfg.preempt.by_reservation:
            return set()
        out: set[str] = set()
        theirs_fair = self.team_key(gang.team) if self.cfg.fair_share else (0.0, 0.0)
        # ``key_without`` per (team, size): the same floats for every running job alike.
        without: dict[tuple[str, float, float], tuple[float, float]] = {}
        for a in self.snap.active:
            v = a.entry
            if (
                a.preempting
                or not v.preemptible
                or priority_rank(v.priority) < priority_rank(gang.priority)
            ):
                continue
            if a.started_at <= gang.waiting_since:  # it did not go ahead of the holder
                continue
            same = v.team == gang.team or not self.cfg.fair_share
            if same:
                mine = theirs = (0.0, 0.0)
            else:
                size = (v.team, v.cpus, v.gpus)
                if size not in without:
                    without[size] = self.key_without(a)
                mine, theirs = without[size], theirs_fair
            # Behind it in order, as it was queued (its own waiting time, not a new one).
            later = (mine, v.waiting_since, v.job_id) > (theirs, gang.waiting_since, gang.job_id)
            behind = priority_rank(v.priority) > priority_rank(gang.priority) or later
            if behind:
                out.add(v.job_id)
        return out

    # -- one job --------------------------------------------------------------------------
    def decide(self, entry: QueueEntry, pos: int) -> QueueDecision:
        snap, shape = self.snap, _shape(entry)
        self.considered.add(entry.job_id)
        self.seen_preemptible[shape] += entry.preemptible
        if shape not in self.never:
            self.never[shape] = never_fits_reason(entry, self.as_nodes())
        wait: Wait | None = None
        if (never := self.never[shape]) is not None:
            wait = Wait(kind=WaitKind.NEVER_FITS, entry=entry, detail=never)
        else:
            team = self.teams.get(entry.team, TeamState())
            quota = _quota_reason(entry, self.usage.get(entry.team) or _Tally(), team.quota)
            if quota is not None:
                wait = Wait(kind=WaitKind.QUOTA, entry=entry, detail=quota)
        placement = None
        if wait is None and shape not in self.full:
            placement = self.fits.get(shape) or place_gang(entry, self.free)
            if placement is None:
                self._full(shape)
            else:
                self.fits[shape] = placement
        end = bound_end(entry, snap.now)
        if placement is not None and self.reservation is not None:
            assert self.at_start is not None
            ok = self.at_start.may_backfill(entry, end) or _borrows(
                entry, self.reservation, now=snap.now, rules=self.cfg.preempt
            )
            if not ok:
                placement = None
                if self._held_back(shape):
                    self._kill(shape)
                wait = Wait(
                    kind=WaitKind.BEHIND_RESERVATION, entry=entry, reservation=self.reservation
                )
        if placement is None and wait is None:
            self.blocked.append(entry)
            if self.cfg.reservations and self.reservation is None:
                self.evict = self.evictable(entry)
                self.reservation = _reserve(entry, snap, self.holders, self.evict)
                self.at_start = StartView.of(self.reservation, snap.totals, self.holders)
                wait = Wait(
                    kind=WaitKind.RESOURCES,
                    entry=entry,
                    reserved=True,
                    reservation=self.reservation,
                )
            else:
                wait = Wait(kind=WaitKind.RESOURCES, entry=entry)
        if placement is not None or (wait is not None and wait.for_resources):
            _add(self.ordered, entry)
        if placement is not None:
            self.free = take(self.free, placement, entry)
            self.fits.clear()
            self._fill_check()
            self.started.append(Holder(entry=entry, end_at=end))
            if self._holders is not None:
                self._holders.append(self.started[-1])
            if self.at_start is not None:
                self.at_start.add(entry, end)
            _add(self.usage, entry)
        return QueueDecision(
            entry=entry,
            position=pos,
            start_now=placement is not None,
            wait=wait,
            placement=placement or [],
        )

    def _kill(self, shape: Shape) -> None:
        self.dead.add(shape)
        self.alive.discard(shape)

    def _full(self, shape: Shape) -> None:
        self.full.add(shape)
        self._kill(shape)

    def _fill_check(self) -> None:
        """Shapes still alive that no longer fit what is free are full: free only shrinks
        within a pass, so none of their jobs can start (found here, not at their first job
        deep in the queue)."""
        for sh in [s for s in self.alive if s not in self.full]:
            if place_gang(_ShapeGang(*sh), self.free) is None:
                self._full(sh)

    def _held_back(self, shape: Shape) -> bool:
        """No job of ``shape`` not yet considered may start ahead of the reservation: none
        may borrow it and none is bounded to end before its start (what one job of the
        shape was refused stays refused for the rest of the pass: capacity only shrinks)."""
        r = self.reservation
        if r is None or r.start_at is None:
            return False
        rules = self.cfg.preempt
        before = (r.start_at - self.snap.now).total_seconds()
        may_borrow = rules.by_reservation and before >= rules.min_runtime_s
        stats = self.index.shapes[shape]
        if may_borrow and stats.preemptible > self.seen_preemptible[shape]:
            return False
        return self._least_left(shape) > before

    def _least_left(self, shape: Shape) -> float:
        """The least bound left among the jobs of ``shape`` not yet considered (inf: none);
        amortised O(1): the considered ones only grow."""
        lefts = self.index.shapes[shape].lefts
        i = self.first_left.get(shape, 0)
        while i < len(lefts) and lefts[i][1] in self.considered:
            i += 1
        self.first_left[shape] = i
        return lefts[i][0] if i < len(lefts) else math.inf

    # -- the pass -------------------------------------------------------------------------
    def run(self, *, max_depth: int | None, complete: bool, order_depth: int | None) -> Plan:
        snap, cfg = self.snap, self.cfg
        order = in_policy_order(self.index, team_key=self.team_key if cfg.fair_share else None)
        left: Counter[Shape] = Counter({s: st.count for s, st in self.index.shapes.items()})
        for shape in left:  # shapes that never fit cannot start: known before the pass
            if shape not in self.never:
                self.never[shape] = never_fits_reason(_ShapeGang(*shape), self.as_nodes())
            if self.never[shape] is not None:
                self.dead.add(shape)
        self.alive = {s for s in left if s not in self.dead}  # shapes that may still start
        self._fill_check()
        preempts = cfg.preempt.by_priority or cfg.preempt.by_fair_share
        out: list[QueueDecision] = []
        unread: QueueEntry | None = None  # the first job not considered (past max_depth)
        for pos, entry in enumerate(order, start=1):
            if max_depth is not None and pos > max_depth:
                unread = entry
                break
            shape = _shape(entry)
            out.append(self.decide(entry, pos))
            left[shape] -= 1
            if left[shape] == 0:
                self.alive.discard(shape)
            if not complete and not self.alive:
                need = 1 if self.reservation is not None else _PREEMPT_CANDIDATES * preempts
                if len(self.blocked) >= need:
                    break
        demanding = set(self.index.per_team) | {t for t, u in self.usage.items() if u.running_jobs}
        fair = entitlements({t: self.teams.get(t, TeamState()).weight for t in sorted(demanding)})
        shares = {t: self.share(t, self.usage) for t in sorted(demanding)}
        reclaimed: list[Preemption] = []
        r = self.reservation
        if r is not None and r.start_at == snap.now and self.evict:
            reclaimed = reclaim_victims(
                r.entry,
                now=snap.now,
                active=snap.active,
                totals=snap.totals,
                evictable=self.evict,
                min_runtime_s=cfg.preempt.min_runtime_s,
            )
        # With a reservation, only its holder may preempt: any other job that made room
        # would still be held back by the reservation, and its victims stopped for nothing.
        blocked = self.blocked[:1] if r is not None else self.blocked
        preemptions = reclaimed or self.preempt(blocked, shares, fair)
        rest: list[QueueEntry] = []
        if not complete and order_depth != 0:
            rest = self.order_rest(order, unread, len(out), order_depth)
        return Plan(
            decisions=_note_skips(out),
            preemptions=preemptions,
            reservation=r,
            shares=shares,
            fair=fair,
            deferred=len(self.index) - len(out),
            rest=rest,
        )

    def order_rest(
        self, order: PolicyOrder, unread: QueueEntry | None, decided: int, depth: int | None
    ) -> list[QueueEntry]:
        """Carry on the order past the last decided job as the complete pass would: none of
        these jobs can start (every shape left is dead), so each is charged to its team's
        order unless it never fits or is over quota (what ``decide`` would find: usage no
        longer changes). ``unread``: a job the order gave and the pass did not consider.
        With fair share, the order's merge runs here, one heap step per job."""
        out: list[QueueEntry] = []
        budget = math.inf if depth is None else depth - decided
        if unread is not None and budget > 0:
            budget -= 1
            self._rest_one(unread, out)
        if not self.cfg.fair_share:
            for entry in order:
                if budget <= 0:
                    break
                budget -= 1
                self._rest_one(entry, out)
            return out
        order.catch_up()
        heap, per_team, never = order.heap, self.index.per_team, self.never
        quotas = {t for t, st in self.teams.items() if st.quota is not None}
        team_key, replace_top, pop = self.team_key, heapq.heapreplace, heapq.heappop
        ordered = self.ordered
        while heap and budget > 0:
            budget -= 1
            top = heap[0]
            team, i = top[4], top[5]
            rows = per_team[team]
            entry = rows[i][1]
            key = top[1]
            if never[(entry.num_workers, entry.cpus_per_worker, entry.gpus_per_worker)] is None:
                out.append(entry)
                if (
                    team not in quotas
                    or _quota_reason(
                        entry, self.usage.get(team) or _Tally(), self.teams[team].quota
                    )
                    is None
                ):
                    u = ordered.get(team)
                    if u is None:
                        u = ordered[team] = _Tally()
                    u.running_jobs += 1
                    u.cpus += entry.num_workers * entry.cpus_per_worker
                    u.gpus += entry.num_workers * entry.gpus_per_worker
                    key = None
            i += 1
            if i < len(rows):
                (rank, since, job_id), _ = rows[i]
                replace_top(heap, (rank, key or team_key(team), since, job_id, team, i))
            else:
                pop(heap)
        return out

    def _rest_one(self, entry: QueueEntry, out: list[QueueEntry]) -> None:
        if self.never[_shape(entry)] is not None:
            return
        team = self.teams.get(entry.team, TeamState())
        usage = self.usage.get(entry.team) or _Tally()
        if _quota_reason(entry, usage, team.quota) is None:
            _add(self.ordered, entry)
        out.append(entry)

    def preempt(
        self,
        blocked: Sequence[QueueEntry],
        shares: Mapping[str, float],
        fair: Mapping[str, float],
    ) -> list[Preemption]:
        snap, rules = self.snap, self.cfg.preempt
        if not (rules.by_priority or rules.by_fair_share):
            return []
        for job in blocked[:_PREEMPT_CANDIDATES]:
            victims = choose_victims(
                job,
                now=snap.now,
                active=snap.active,
                totals=snap.totals,
                shares=shares,
                fair=fair,
                rules=rules,
                job_share=dominant_share(
                    job.cpus, job.gpus, total_cpus=self.total_cpus, total_gpus=self.total_gpus
                ),
            )
            if victims:
                return victims
        return []


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
        and priority_rank(entry.priority) >= priority_rank(reservation.entry.priority)
        and (start is None or (start - now).total_seconds() >= rules.min_runtime_s)
    )


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


def _note_skips(decisions: list[QueueDecision]) -> list[QueueDecision]:
    """On each job waiting for resources, name the jobs behind it that start instead."""
    out = list(decisions)
    behind: list[str] = []  # ids of starting jobs after position i, nearest last
    for i in range(len(decisions) - 1, -1, -1):
        d = decisions[i]
        if d.start_now:
            behind.append(d.entry.job_id)
        elif behind and d.wait is not None and d.wait.for_resources:
            out[i] = replace(d, wait=replace(d.wait, skipped_for=tuple(reversed(behind))))
    return out
