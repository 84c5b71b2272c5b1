"""The scheduling policy: one snapshot in, one plan out. Pure; ``snapshot.now`` is its clock.

The live loop (``service.scheduler.loop``), the ETA forward run (``policy.eta``) and the
trace simulator (``service.sim.engine``) all call ``plan``; ``PolicyConfig`` picks the
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
   A later blocked job whose accelerator types no holder accepts gets one too, on its
   types' nodes (``policy.type_reservations``: strict EASY, no borrowing or reclaim).

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
from dataclasses import dataclass, replace
from functools import cached_property

from service.policy.capacity import NodeFree, never_fits_reason, place_gang, take
from service.policy.fairshare import (
    HORIZON_S,
    GpuTypes,
    dominant_share,
    entitlements,
    fair_key,
    job_share,
)
from service.policy.order import PolicyOrder, in_policy_order
from service.policy.plan_steps import AsNodes as _AsNodes
from service.policy.plan_steps import borrows as _borrows
from service.policy.plan_steps import note_skips as _note_skips
from service.policy.plan_steps import reserve_for as _reserve
from service.policy.plan_types import (
    POLICIES,
    Plan,
    PolicyConfig,
    QueueDecision,
    Wait,
    WaitKind,
    bound_end,
)
from service.policy.preemption import (
    Preemption,
    choose_victims,
    reclaim_victims,
)
from service.policy.queue_index import QueueIndex, Shape, shape_of
from service.policy.reservations import (
    Holder,
    Reservation,
    StartView,
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
from service.policy.team_tally import Tally as _Tally
from service.policy.team_tally import add as _add
from service.policy.team_tally import held as _held
from service.policy.team_tally import quota_reason as _quota_reason
from service.policy.team_tally import type_quota as _type_quota
from service.policy.type_reservations import TypeReservations
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

# Preemption is tried for the first few blocked jobs in order (bounds the cost per tick).
_PREEMPT_CANDIDATES = 4


_shape = shape_of


@dataclass(frozen=True)
class _ShapeGang:
    """A gang shape as ``capacity.Gang`` (never-fits reasons depend on the shape only)."""

    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    accelerators: tuple[str, ...] = ()


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
        # Per-type GPU quotas (issue 30): what each team holds per type is counted, and the
        # node types are known by node id.
        self.typed_quotas = any(
            t.quota is not None and t.quota.max_gpus_by_type for t in snap.teams.values()
        )
        # A mixed cluster's GPUs per type: fair shares are kept per type (None: pooled).
        self.types = GpuTypes.of(snap.totals, snap.type_weights)
        types = self.types
        self.usage = _held(snap, by_type=self.typed_quotas, types=types)  # what each holds
        # The order charges each team for its jobs already considered (placed or waiting
        # for resources), so positions interleave teams as their starts will.
        self.ordered = _held(snap, types=types)
        self.free = list(snap.free)
        self._holders: list[Holder] | None = None  # built when a reservation needs them
        self.started: list[Holder] = []
        self.reservation: Reservation | None = None
        self.at_start: StartView | None = None  # capacity at the reservation's start
        self.evict: set[str] = set()  # running jobs the reservation may take back
        self.typed = TypeReservations()  # one more per set of types no holder shares
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
            u.cpus,
            u.gpus,
            total_cpus=self.total_cpus,
            total_gpus=self.total_gpus,
            by_type=u.fair,
            types=self.types,
        )

    def team_key(self, team: str) -> tuple[float, float]:
        """``fair_key`` of the team's share as ordered so far (the order reads it once per
        job: the constants are kept per team)."""
        c = self.team_consts.get(team)
        if c is None:
            t = self.teams.get(team, TeamState())
            c = self.team_consts[team] = (t.owed_s, t.weight, t.history_share / t.weight)
        s = self.share(team, self.ordered) if team in self.ordered else 0.0
        return ((s * HORIZON_S - c[0]) / c[1], c[2])

    def key_without(self, a: ActiveJob) -> tuple[float, float]:
        """The fair key of ``a``'s team were ``a`` stopped and queued again."""
        u = self.ordered.get(a.entry.team) or _Tally()
        t = self.teams.get(a.entry.team, TeamState())
        fair = dict(u.fair or {})
        if self.types is not None:
            self.types.charge(fair, a.entry.gpus, a.accelerator, a.entry.accelerators, -1.0)
        s = dominant_share(
            u.cpus - a.entry.cpus,
            u.gpus - a.entry.gpus,
            total_cpus=self.total_cpus,
            total_gpus=self.total_gpus,
            by_type=fair,
            types=self.types,
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
        # ``key_without`` per (team, size, type): the same floats for every such job alike.
        without: dict[tuple[str, float, float, str], tuple[float, float]] = {}
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
                size = (v.team, v.cpus, v.gpus, a.accelerator)
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
        gang = entry  # narrowed to the types its team's per-type quota leaves (issue 30)
        if wait is None and self.typed_quotas and entry.gpus > 0:
            gang, detail = self._within_type_quota(entry)
            if detail is not None:
                wait = Wait(kind=WaitKind.QUOTA, entry=entry, detail=detail)
        placement = None
        if wait is None and gang is not entry:
            placement = place_gang(gang, self.free)  # this team's types only: not cached
        elif wait is None and shape not in self.full:
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
        refused = None if placement is None else self.typed.refusing(entry, end)
        if refused is not None:  # it would delay a reservation on its types (issue 30)
            placement = None
            r = refused.reservation
            assert r.start_at is not None  # a reservation with no start refuses nobody
            if self._least_left(shape) > (r.start_at - snap.now).total_seconds():
                self._kill(shape)  # no job of it left ends before that start
            wait = Wait(kind=WaitKind.BEHIND_RESERVATION, entry=entry, reservation=r)
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
            elif self.cfg.reservations and self.typed.may_hold(entry, self.reservation):
                held = self.typed.reserve(entry, snap, self.holders)
                wait = Wait(kind=WaitKind.RESOURCES, entry=entry, reserved=True, reservation=held)
            else:
                wait = Wait(kind=WaitKind.RESOURCES, entry=entry)
        if placement is not None or (wait is not None and wait.for_resources):
            on = self.node_types.get(placement[0], "") if placement else None
            _add(self.ordered, entry, on, self.types)
        if placement is not None:
            self.free = take(self.free, placement, entry)
            self.fits.clear()
            self._fill_check()
            self.started.append(Holder(entry=entry, end_at=end))
            if self._holders is not None:
                self._holders.append(self.started[-1])
            if self.at_start is not None:
                self.at_start.add(entry, end)
            self.typed.add(entry, end)
            on = self.node_types.get(placement[0], "") if placement else ""
            _add(self.usage, entry, on, self.types)
        return QueueDecision(
            entry=entry,
            position=pos,
            start_now=placement is not None,
            wait=wait,
            placement=placement or [],
        )

    @cached_property
    def node_types(self) -> dict[str, str]:
        """Node id -> accelerator type ("" untyped), built when first read."""
        return {n.node_id: n.accelerator for n in self.snap.totals}

    def _within_type_quota(self, entry: QueueEntry) -> tuple[QueueEntry, str | None]:
        """``entry`` narrowed to the types its team's per-type quota leaves it (itself when
        the quota leaves all it accepts), or why none is left."""
        quota = self.teams.get(entry.team, TeamState()).quota
        caps = None if quota is None else quota.max_gpus_by_type
        if not caps:
            return entry, None
        types = sorted({t for t in self.node_types.values() if t})
        ok, detail = _type_quota(entry, self.usage.get(entry.team) or _Tally(), caps, types)
        if detail is not None:
            return entry, detail
        if ok == (entry.accelerators or tuple(types)):
            return entry, None  # every type it accepts is within the quota
        return replace(entry, accelerators=ok), None

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
            reservations=[] if r is None else [r, *self.typed.reservations],
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
            if never[shape_of(entry)] is None:
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
                    if self.types is not None:
                        u.fair = u.fair or {}
                        self.types.charge(u.fair, entry.gpus, None, entry.accelerators)
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
            _add(self.ordered, entry, None, self.types)
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
                job_share=job_share(
                    job.cpus,
                    job.gpus,
                    total_cpus=self.total_cpus,
                    total_gpus=self.total_gpus,
                    types=self.types,
                    accepts=job.accelerators,
                ),
                types=self.types,
            )
            if victims:
                return victims
        return []
