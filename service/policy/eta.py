"""ETAs: when a running job ends, and when a queued job starts. Pure.

- ``running_end``: the measured step rate x the steps left, bounded by what is left of
  max_runtime (run time counts across attempts); None when neither is known.
- ``estimate_starts``: one forward run for the whole queue, once per tick: the queue in this
  tick's ``policy.plan`` order, each job placed at the earliest expected end (of a running
  or virtually started job) at which it fits, never before the job ahead of it. A job
  started virtually holds its capacity until its own bound (rest of max_runtime), else
  ``default_runtime_s``, else for ever (then the jobs behind it get no estimate). No
  preemption or backfill is assumed. Cost: one gang placement per queued job and per end
  passed (it was a whole ``plan`` per end, i.e. quadratic in the queue: docs/scheduling.md),
  each over the nodes' free levels (``capacity.FreeBuckets``), not every node.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

from service.policy.capacity import EPS, FreeBuckets, NodeFree, pack
from service.policy.plan import Plan, PolicyConfig, bound_end, plan
from service.policy.snapshot import ActiveJob, QueueEntry, Snapshot, TeamQuota, TeamUsage

__all__ = [
    "LONG_WAIT_S",
    "Eta",
    "EtaModel",
    "RuntimeHistory",
    "RuntimeModel",
    "WaitHistory",
    "estimate_ranges",
    "estimate_starts",
    "running_end",
]


def running_end(
    *,
    now: datetime,
    started_at: datetime,
    steps_per_s: float | None,
    steps_left: int | None,
    max_runtime_s: float | None,
    run_s_before: float = 0.0,
) -> datetime | None:
    """Expected end of a running attempt; ``run_s_before``: run time of earlier attempts."""
    ends: list[datetime] = []
    if steps_per_s is not None and steps_per_s > 0 and steps_left is not None:
        ends.append(now + timedelta(seconds=max(steps_left, 0) / steps_per_s))
    if max_runtime_s is not None:
        ends.append(started_at + timedelta(seconds=max(max_runtime_s - run_s_before, 0.0)))
    return max(min(ends), now) if ends else None


def _virtual_end(entry: QueueEntry, start: datetime, default_s: float | None) -> datetime | None:
    end = bound_end(entry, start)
    if end is None and default_s is not None:
        end = start + timedelta(seconds=default_s)
    return end


def estimate_starts(
    snap: Snapshot,
    cfg: PolicyConfig | None = None,
    *,
    plan_now: Plan | None = None,
    default_runtime_s: float | None = None,
    want: Collection[str] | None = None,
) -> dict[str, datetime]:
    """Job id -> estimated start, for the queued jobs that get one: one forward run for the
    whole queue. ``plan_now``: this tick's plan of ``snap`` (computed when not given); with
    ``want``, it stops as soon as those jobs have theirs."""
    p = plan_now if plan_now is not None else plan(snap, cfg)
    if want is not None:
        # The plan's leading starts are placed now by the forward run too (it places the
        # queue in the same order on the same free capacity, ``snap.free`` being at most
        # the packing of the running jobs per node as both builders make it, and none of
        # them is over quota): when every job wanted is among them, no forward run.
        now: dict[str, datetime] = {}
        for d in p.decisions:
            if not d.start_now:
                break
            now[d.entry.job_id] = snap.now
        if all(i in now for i in want):
            return {i: now[i] for i in want}
    return _Forward(snap, default_runtime_s).run(p.in_order(), want=want)


class _Forward:
    """The queue in the plan's order, each job started at the earliest expected end (of a
    running or virtually started job) at which it fits with the jobs ahead of it placed: the
    clock only moves forward, so no job is estimated ahead of one before it (the reservation
    holds back backfill that would delay it). Capacity: the node totals minus our packing of
    the running jobs (``capacity.free_now``'s), each end giving back its job's nodes. Cost:
    one gang placement (``FreeBuckets.place``) per queued job and per end passed."""

    def __init__(self, snap: Snapshot, default_runtime_s: float | None) -> None:
        self.snap, self.default_s = snap, default_runtime_s
        self.now = snap.now
        self.ends: list[tuple[datetime, int, list[str], QueueEntry]] = []  # a heap
        self.seq = itertools.count()
        self.usage: dict[str, TeamUsage] = {}
        # Usage is read only against quotas: not kept when no team has one.
        self.quotas = any(
            t.quota is not None
            and (
                t.quota.max_gpus is not None
                or t.quota.max_cpus is not None
                or t.quota.max_running_jobs is not None
            )
            for t in snap.teams.values()
        )
        packed, placements = snap.active_packing or pack(
            snap.totals, [a.entry for a in snap.active]
        )
        # A job past its expected end is about to end: one second from now, not never.
        soon = snap.now + timedelta(seconds=1)
        for a, placement in zip(snap.active, placements, strict=True):
            self._charge(a.entry, 1)
            end = a.expected_end_at
            if placement is not None and end is not None:
                self._push(max(end, soon) if end <= snap.now else end, placement, a.entry)
        ours = {n.node_id: n for n in packed}
        # The nodes as the run moves them, bucketed by free level (``capacity.FreeBuckets``:
        # a placement reads the levels, not every node).
        self.free = FreeBuckets(
            [
                NodeFree(
                    node_id=n.node_id,
                    cpus=min(n.cpus, ours[n.node_id].cpus) if n.node_id in ours else n.cpus,
                    gpus=min(n.gpus, ours[n.node_id].gpus) if n.node_id in ours else n.gpus,
                )
                for n in snap.free
            ]
        )
        self.index = {nid: i for i, nid in enumerate(self.free.ids)}
        # Free capacity summed over the nodes: a gang needing more cannot be placed.
        self.free_cpus = sum(self.free.cpus)
        self.free_gpus = sum(self.free.gpus)

    def _push(self, end: datetime, placement: list[str], entry: QueueEntry) -> None:
        heapq.heappush(self.ends, (end, next(self.seq), placement, entry))

    def _give(self, placement: list[str], e: QueueEntry, sign: int) -> None:
        """Give back (1) or take (-1) ``e``'s workers on their nodes; touches only those."""
        free = self.free
        for nid in dict.fromkeys(placement):
            i, n = self.index[nid], placement.count(nid)
            free.set(
                i,
                cpus=free.cpus[i] + sign * n * e.cpus_per_worker,
                gpus=free.gpus[i] + sign * n * e.gpus_per_worker,
            )
        self.free_cpus += sign * len(placement) * e.cpus_per_worker
        self.free_gpus += sign * len(placement) * e.gpus_per_worker

    def _charge(self, e: QueueEntry, sign: int) -> None:
        if not self.quotas:
            return
        u = self.usage.get(e.team, TeamUsage())
        self.usage[e.team] = TeamUsage(
            running_jobs=u.running_jobs + sign,
            cpus=u.cpus + sign * e.cpus,
            gpus=u.gpus + sign * e.gpus,
        )

    def _release(self) -> bool:
        """Move the clock to the next end and give its capacity back; False: no end left."""
        if not self.ends:
            return False
        end, _, placement, entry = heapq.heappop(self.ends)
        self.now = max(self.now, end)
        self._give(placement, entry, 1)
        self._charge(entry, -1)
        return True

    def run(
        self, queue: Sequence[QueueEntry], *, want: Collection[str] | None
    ) -> dict[str, datetime]:
        """``queue``: in policy order, the jobs that never fit left out."""
        out: dict[str, datetime] = {}
        missing = set(want) if want is not None else None
        if missing is not None and not missing:
            return out
        teams = self.snap.teams
        for e in queue:
            quota = teams[e.team].quota if e.team in teams else None
            while True:
                over = self.quotas and _over_quota(e, self.usage.get(e.team, TeamUsage()), quota)
                placement: list[str] | None = None
                slack = e.num_workers * EPS  # place_gang allows EPS per worker
                if (
                    not over
                    and self.free_cpus + slack >= e.cpus
                    and self.free_gpus + slack >= e.gpus
                ):
                    nodes = self.free.place(e)  # what ``place_gang`` would choose
                    placement = None if nodes is None else [self.free.ids[i] for i in nodes]
                if placement is not None or not self._release():
                    break
            if placement is None:
                break  # it holds nothing that ends: nothing behind it gets an estimate
            out[e.job_id] = self.now
            self._give(placement, e, -1)
            self._charge(e, 1)
            end = _virtual_end(e, self.now, self.default_s)
            if end is not None:
                self._push(end, placement, e)
            if missing is not None:
                missing.discard(e.job_id)
                if not missing:
                    break
        return out


def _over_quota(e: QueueEntry, usage: TeamUsage, quota: TeamQuota | None) -> bool:
    if quota is None:
        return False
    return (
        (quota.max_running_jobs is not None and usage.running_jobs + 1 > quota.max_running_jobs)
        or (quota.max_gpus is not None and usage.gpus + e.gpus > quota.max_gpus)
        or (quota.max_cpus is not None and usage.cpus + e.cpus > quota.max_cpus)
    )


# -- honest ETAs (issue 30): expected run times, backfill, a p90 ------------------------------

_MIN_SAMPLES = 8  # finished jobs a team needs before its own history is used (else pooled)
_MIN_CALIBRATION = 20  # started jobs before the p90 scale is learned from their waits
LONG_WAIT_S = 600.0  # predicted waits the calibration learns from (shorter ones are noise)


@dataclass(frozen=True, kw_only=True)
class RuntimeModel:
    """How long jobs really run, learned online from finished jobs: per team, run time ÷
    max_runtime of its recently finished jobs (``fractions``), and the run times of those
    finished without a limit (``durations``, seconds). A team with fewer than
    ``_MIN_SAMPLES`` uses every team's pooled; with fewer than that in all a job is expected
    to run to its limit (the old, late bound) and a job without one for ``default_s``."""

    fractions: Mapping[str, Sequence[float]] = field(default_factory=dict)
    durations: Mapping[str, Sequence[float]] = field(default_factory=dict)
    default_s: float | None = None

    def _pick(self, team: str, by: Mapping[str, Sequence[float]]) -> Sequence[float]:
        own = by.get(team, ())
        if len(own) >= _MIN_SAMPLES:
            return own
        pooled = [x for xs in by.values() for x in xs]
        return pooled if len(pooled) >= _MIN_SAMPLES else ()

    def fraction(self, team: str, q: float | None) -> float:
        """The mean (``q`` None: what a sum of many jobs runs) or the ``q`` quantile of the
        team's run time ÷ limit; 1.0 without history."""
        xs = self._pick(team, self.fractions)
        if not xs:
            return 1.0
        v = sum(xs) / len(xs) if q is None else _quantile(xs, q)
        return min(max(v, 0.0), 1.0)

    def duration(self, team: str, q: float | None) -> float | None:
        xs = self._pick(team, self.durations)
        if not xs:
            return self.default_s
        return sum(xs) / len(xs) if q is None else _quantile(xs, q)


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


@dataclass(frozen=True, kw_only=True)
class EtaModel:
    """What the estimates learn online. ``runtime``: how long attempts hold capacity.
    ``wait_ratios``: per team and priority class, for recently started jobs, the actual
    wait ÷ the wait the forward run predicted at their first estimate (from when it was
    made; only
    predictions of at least ``LONG_WAIT_S``): what the forward run cannot see (fair-share
    preemption, arrivals ahead in the fair order, priorities) shows as a bias per team and
    class. A predicted wait is scaled by their median (the estimate) and their ``p90_q``
    quantile (the p90), once there are ``_MIN_CALIBRATION`` of them (else the class's over
    all teams, else all); until
    then the estimate is the forward run's and the p90 scales it by the team's ``p90_q``
    quantile of run-time fractions ÷ their mean (every job ahead running that long)."""

    runtime: RuntimeModel = field(default_factory=RuntimeModel)
    wait_ratios: Mapping[tuple[str, str], Sequence[float]] = field(default_factory=dict)
    p90_q: float = 0.9

    def scales(self, team: str, priority: str) -> tuple[float, float]:
        """(estimate, p90) multipliers of a predicted wait for ``team``'s jobs of
        ``priority``: from their own ratios, else their class's over all teams, else all."""
        xs: Sequence[float] = self.wait_ratios.get((team, priority), ())
        if len(xs) < _MIN_CALIBRATION:
            xs = [x for (_, c), v in self.wait_ratios.items() if c == priority for x in v]
        if len(xs) < _MIN_CALIBRATION:
            xs = [x for v in self.wait_ratios.values() for x in v]
        mean = self.runtime.fraction(team, None)
        spread = self.runtime.fraction(team, self.p90_q) / mean if mean > 0 else 1.0
        if len(xs) >= _MIN_CALIBRATION:
            # The spread of the waits seen, and at least that of the run times ahead and
            # that of every team's waits around their median: the waits seen lag (a start
            # is learned from only after the wait), so a change in the queue shows late.
            mid = _quantile(xs, 0.5)
            every = [x for v in self.wait_ratios.values() for x in v]
            rel = _quantile(every, self.p90_q) / max(_quantile(every, 0.5), 1e-9)
            return mid, max(_quantile(xs, self.p90_q), mid * spread, mid * rel, 1.0)
        return 1.0, max(spread, 1.0)


class Eta(NamedTuple):
    start: datetime  # the estimate
    p90: datetime  # 9 in 10 start by then
    predicted: datetime  # the forward run's start, before calibration (what it learns from)


def estimate_ranges(
    snap: Snapshot,
    cfg: PolicyConfig | None = None,
    *,
    plan_now: Plan | None = None,
    model: EtaModel | None = None,
    want: Collection[str] | None = None,
) -> dict[str, Eta]:
    """Job id -> its ``Eta`` (estimate, p90, the forward run's prediction), for the queued
    jobs that get one.

    One forward run over the plan's order, work-conserving as the policy is: at each
    expected end the earliest job in order that fits starts, and the first job in order
    that does not fit holds a reservation on the nodes that free up soonest for it (EASY:
    what starts there must end before, or leave it what it needs). Jobs end at their
    expected end, not their bound: a running job's step rate when known, else its limit x
    the team's attempts' run time ÷ limit (``RuntimeModel``); a queued job likewise once
    started. The p90: the predicted wait x ``EtaModel.p90_scale``."""
    p = plan_now if plan_now is not None else plan(snap, cfg)
    m = model or EtaModel()
    queue = p.in_order()
    if want is not None:
        now: dict[str, Eta] = {}
        for d in p.decisions:
            if not d.start_now:
                break
            now[d.entry.job_id] = Eta(snap.now, snap.now, snap.now)
        if all(i in now for i in want):
            return {i: now[i] for i in want}
    mid = _Backfill(snap, m.runtime).run(queue, want=want)
    teams = {e.job_id: (e.team, e.priority) for e in queue if e.job_id in mid}
    scales = {k: m.scales(*k) for k in set(teams.values())}
    out: dict[str, Eta] = {}
    for i, t in mid.items():
        wait = t - snap.now
        s50, s90 = scales[teams[i]]
        if wait.total_seconds() < LONG_WAIT_S:
            s50 = 1.0  # a start minutes away: the ends just ahead decide it
        out[i] = Eta(snap.now + wait * s50, snap.now + wait * max(s90, s50), t)
    return out


class _Backfill:
    """The forward run of ``estimate_ranges``: per node free capacity and the ends of the
    jobs on it; waiting jobs in per-(team, shape) lines in policy order (a line's head is
    the only one of it that can start: the same shape behind the same head), so each event
    costs O(lines), not O(queue)."""

    def __init__(self, snap: Snapshot, runtime: RuntimeModel) -> None:
        self.snap, self.runtime, self.q = snap, runtime, None
        self._fractions: dict[str, float] = {}  # per team, this run's
        self._durations: dict[str, float | None] = {}
        self.now = snap.now
        self.ends: list[tuple[datetime, int, list[int], QueueEntry]] = []
        self.seq = itertools.count()
        self.usage: dict[str, TeamUsage] = {}
        self.quotas = any(
            t.quota is not None
            and (
                t.quota.max_gpus is not None
                or t.quota.max_cpus is not None
                or t.quota.max_running_jobs is not None
            )
            for t in snap.teams.values()
        )
        packed, placements = snap.active_packing or pack(
            snap.totals, [a.entry for a in snap.active]
        )
        ours = {n.node_id: n for n in packed}
        nodes = [
            NodeFree(
                node_id=n.node_id,
                cpus=min(n.cpus, ours[n.node_id].cpus) if n.node_id in ours else n.cpus,
                gpus=min(n.gpus, ours[n.node_id].gpus) if n.node_id in ours else n.gpus,
            )
            for n in snap.free
        ]
        self.free = FreeBuckets(nodes)
        self.index = {nid: i for i, nid in enumerate(self.free.ids)}
        # True free per node (the buckets show a reserved node as empty).
        self.cpus = list(self.free.cpus)
        self.gpus = list(self.free.gpus)
        self.on_node: list[list[tuple[datetime, int, float, float]]] = [[] for _ in nodes]
        soon = snap.now + timedelta(seconds=1)
        for a, placement in zip(snap.active, placements, strict=True):
            self._charge(a.entry, 1)
            if placement is None:
                continue
            end = self._running_end(a)
            if end is None:
                continue  # holds its nodes for ever
            end = max(end, soon)
            self._push(end, [self.index[n] for n in placement if n in self.index], a.entry)
        self.reserved: dict[int, datetime] = {}  # node -> the reserved start on it
        self.need = (0.0, 0.0)  # what the reserved job needs on each (cpus, gpus)

    def _running_end(self, a: ActiveJob) -> datetime | None:
        e, end = a.entry, a.expected_end_at
        if e.max_runtime_s is None:
            if end is not None:
                return end
            d = self.runtime.duration(e.team, self.q)
            return None if d is None else max(a.started_at + timedelta(seconds=d), self.now)
        bound = a.started_at + timedelta(seconds=max(e.max_runtime_s - e.run_s, 0.0))
        if end is not None and abs((end - bound).total_seconds()) > 1.0:
            return end  # from its step rate
        held = e.max_runtime_s * self._fraction(e.team)
        return max(min(a.started_at + timedelta(seconds=held), bound), self.now)

    def _fraction(self, team: str) -> float:
        f = self._fractions.get(team)
        if f is None:
            f = self._fractions[team] = self.runtime.fraction(team, self.q)
        return f

    def _expected_s(self, e: QueueEntry) -> float | None:
        """How long ``e``'s next attempt holds its capacity: the team's attempts' (to their
        end or preemption) fraction of the limit, bounded by what is left of it."""
        if e.max_runtime_s is None:
            if e.team not in self._durations:
                self._durations[e.team] = self.runtime.duration(e.team, self.q)
            return self._durations[e.team]
        return min(e.max_runtime_s * self._fraction(e.team), max(e.max_runtime_s - e.run_s, 0.0))

    def _push(self, end: datetime, nodes: list[int], e: QueueEntry) -> None:
        t = next(self.seq)
        heapq.heappush(self.ends, (end, t, nodes, e))
        for i in dict.fromkeys(nodes):
            n = nodes.count(i)
            self.on_node[i].append((end, t, n * e.cpus_per_worker, n * e.gpus_per_worker))

    def _set(self, i: int) -> None:
        """Show node ``i``'s free capacity, a reserved node's too (``_place``)."""
        self.free.set(i, cpus=self.cpus[i], gpus=self.gpus[i])

    def _place(self, e: QueueEntry) -> list[int] | None:
        """Where ``e`` starts now, EASY: on a reserved node only if it is expected to end
        before the reserved start, or leaves that node what the reserved job needs; else
        on what the reservation leaves (its nodes shown less what it needs)."""
        got = self.free.place(e)
        if got is None or not self.reserved or not any(i in self.reserved for i in got):
            return got
        d = self._expected_s(e)
        by = min(self.reserved[i] for i in got if i in self.reserved)
        if d is not None and self.now + timedelta(seconds=d) <= by:
            return got
        need = self.need
        for i in self.reserved:
            self.free.set(
                i, cpus=max(self.cpus[i] - need[0], 0.0), gpus=max(self.gpus[i] - need[1], 0.0)
            )
        got = self.free.place(e)
        for i in self.reserved:
            self._set(i)
        return got

    def _give(self, nodes: list[int], e: QueueEntry, sign: int) -> None:
        for i in dict.fromkeys(nodes):
            n = nodes.count(i)
            self.cpus[i] += sign * n * e.cpus_per_worker
            self.gpus[i] += sign * n * e.gpus_per_worker
            self._set(i)

    def _charge(self, e: QueueEntry, sign: int) -> None:
        if not self.quotas:
            return
        u = self.usage.get(e.team, TeamUsage())
        self.usage[e.team] = TeamUsage(
            running_jobs=u.running_jobs + sign,
            cpus=u.cpus + sign * e.cpus,
            gpus=u.gpus + sign * e.gpus,
        )

    def _start(self, e: QueueEntry, nodes: list[int]) -> None:
        self._give(nodes, e, -1)
        self._charge(e, 1)
        d = self._expected_s(e)
        if d is not None:
            self._push(self.now + timedelta(seconds=d), nodes, e)

    def _release(self) -> bool:
        if not self.ends:
            return False
        end, t, nodes, e = heapq.heappop(self.ends)
        self.now = max(self.now, end)
        for i in dict.fromkeys(nodes):
            self.on_node[i] = [x for x in self.on_node[i] if x[1] != t]
        self._give(nodes, e, 1)
        self._charge(e, -1)
        return True

    def _reserve(self, e: QueueEntry) -> list[int] | None:
        """The nodes that free up soonest for one worker each of ``e`` (a worker per node:
        a gang of whole-node workers exactly, smaller ones late at worst), reserved for
        it from the latest of those times (what others start there stops by then:
        ``_borrow``); None if too few nodes could ever hold a worker."""
        times: list[tuple[datetime, int]] = []
        for i in range(len(self.cpus)):
            c, g = self.cpus[i], self.gpus[i]
            at = self.now
            if not (c + EPS >= e.cpus_per_worker and g + EPS >= e.gpus_per_worker):
                ok = False
                for end, _, jc, jg in sorted(self.on_node[i]):
                    c, g, at = c + jc, g + jg, end
                    if c + EPS >= e.cpus_per_worker and g + EPS >= e.gpus_per_worker:
                        ok = True
                        break
                if not ok:
                    continue
            times.append((at, i))
        if len(times) < e.num_workers:
            return None
        times.sort()
        chosen = [i for _, i in times[: e.num_workers]]
        at = times[e.num_workers - 1][0]
        for i in chosen:
            self.reserved[i] = at
        self.need = (e.cpus_per_worker, e.gpus_per_worker)
        return chosen

    def _fits_reserved(self, e: QueueEntry, nodes: list[int]) -> bool:
        return all(
            self.cpus[i] + EPS >= e.cpus_per_worker and self.gpus[i] + EPS >= e.gpus_per_worker
            for i in nodes
        )

    def run(
        self, queue: Sequence[QueueEntry], *, want: Collection[str] | None
    ) -> dict[str, datetime]:
        out: dict[str, datetime] = {}
        missing = set(want) if want is not None else None
        if missing is not None and not missing:
            return out
        lines: dict[tuple[str, int, float, float], list[tuple[int, QueueEntry]]] = {}
        for pos, e in enumerate(queue):
            key = (
                e.team if self.quotas else "",
                e.num_workers,
                e.cpus_per_worker,
                e.gpus_per_worker,
            )
            lines.setdefault(key, []).append((pos, e))
        heads = dict.fromkeys(lines, 0)  # next waiting job of each line
        live = list(lines)  # the lines with a job waiting
        teams = self.snap.teams
        dead: set[tuple[str, int, float, float]] = set()  # lines that cannot start now
        held: tuple[QueueEntry, list[int]] | None = None  # the reservation

        def done(e: QueueEntry) -> bool:
            out[e.job_id] = self.now
            if missing is not None:
                missing.discard(e.job_id)
                return not missing
            return False

        def take(key: tuple[str, int, float, float]) -> None:
            heads[key] += 1
            if heads[key] >= len(lines[key]):
                live.remove(key)

        while True:
            if held is not None and self._fits_reserved(*held):
                e, nodes = held
                for i in nodes:
                    del self.reserved[i]
                held = None
                dead.clear()  # what the reservation held back is free again
                placed = self.free.place(e)
                if placed is None:  # cannot happen: its nodes fit one worker each
                    placed = nodes
                self._start(e, placed)
                if done(e):
                    return out
            while True:
                best: tuple[int, QueueEntry, list[int], tuple[str, int, float, float]] | None = None
                first: tuple[int, QueueEntry, tuple[str, int, float, float]] | None = None
                top = self.free.max_gpus()
                for key in live:
                    pos, e = lines[key][heads[key]]
                    if first is None or pos < first[0]:
                        first = (pos, e, key)
                    if key in dead or (best is not None and pos > best[0]):
                        continue
                    if e.gpus_per_worker > top + EPS:
                        dead.add(key)
                        continue
                    if self.quotas:
                        quota = teams[e.team].quota if e.team in teams else None
                        if _over_quota(e, self.usage.get(e.team, TeamUsage()), quota):
                            dead.add(key)
                            continue
                    got = self._place(e)
                    if got is not None:
                        best = (pos, e, got, key)
                    else:
                        dead.add(key)  # until capacity grows: it only shrinks meanwhile
                if best is not None:
                    pos, e, got, key = best
                    take(key)
                    self._start(e, got)
                    if done(e):
                        return out
                    continue
                if first is not None and held is None:
                    pos, e, key = first
                    hold = self._reserve(e)
                    if hold is not None:
                        take(key)
                        held = (e, hold)
                        if self._fits_reserved(e, hold):
                            break  # starts at once (the outer loop)
                        continue
                break
            if held is not None and self._fits_reserved(*held):
                continue
            if not live and held is None:
                return out
            if not self._release():
                return out
            dead.clear()


class RuntimeHistory:
    """The live loop's ``RuntimeModel``, learned online from its snapshots: an attempt seen
    active at one tick and gone at the next held its capacity from its start to then
    (finished or preempted); per team the last ``keep`` such lengths ÷ max_runtime (or, for
    jobs without one, the lengths). Starts empty (a restart forgets: the first ETAs hold
    jobs to their limit until attempts end)."""

    def __init__(self, *, keep: int = 200) -> None:
        self.keep = keep
        self.fractions: dict[str, list[float]] = {}
        self.durations: dict[str, list[float]] = {}
        self._active: dict[tuple[str, datetime], ActiveJob] = {}

    def observe(self, snap: Snapshot) -> RuntimeModel:
        seen = {(a.entry.job_id, a.started_at): a for a in snap.active}
        for key, a in self._active.items():
            if key in seen:
                continue
            held = max((snap.now - a.started_at).total_seconds(), 0.0)
            limit = a.entry.max_runtime_s
            if limit:
                xs = self.fractions.setdefault(a.entry.team, [])
                xs.append(min(held / limit, 1.0))
            else:
                xs = self.durations.setdefault(a.entry.team, [])
                xs.append(held)
            del xs[: -self.keep]
        self._active = seen
        return self.model()

    def model(self) -> RuntimeModel:
        return RuntimeModel(
            fractions={t: tuple(v) for t, v in self.fractions.items()},
            durations={t: tuple(v) for t, v in self.durations.items()},
        )


class WaitHistory:
    """The live loop's ``EtaModel.wait_ratios``, learned online: each queued job's first
    estimate (when made, the forward run's predicted start) is kept until the job is seen
    running; then its actual wait ÷ the predicted one is recorded for its team (the last
    ``keep``), if the prediction was at least ``LONG_WAIT_S`` away. A job that leaves the
    queue otherwise (cancelled, deleted) is forgotten. Starts empty after a restart."""

    def __init__(self, *, keep: int = 200) -> None:
        self.keep = keep
        self.ratios: dict[tuple[str, str], list[float]] = {}  # (team, priority) -> ratios
        # job -> ((team, priority), when estimated, the predicted start)
        self._first: dict[str, tuple[tuple[str, str], datetime, datetime]] = {}

    def observe(self, snap: Snapshot) -> dict[tuple[str, str], tuple[float, ...]]:
        """Record the starts this snapshot shows; the ratios per team and class."""
        if self._first:
            queued = {e.job_id for e in snap.queued}
            for a in snap.active:
                got = self._first.pop(a.entry.job_id, None)
                if got is None:
                    continue
                key, made, predicted = got
                wait = (predicted - made).total_seconds()
                if wait >= LONG_WAIT_S:
                    xs = self.ratios.setdefault(key, [])
                    xs.append(max((a.started_at - made).total_seconds(), 0.0) / wait)
                    del xs[: -self.keep]
            for i in [i for i in self._first if i not in queued]:
                del self._first[i]
        return {t: tuple(v) for t, v in self.ratios.items()}

    def estimated(self, snap: Snapshot, etas: Mapping[str, Eta]) -> None:
        """Keep the first estimate of each job that got one at this snapshot."""
        teams = None
        for i, eta in etas.items():
            if i in self._first:
                continue
            if teams is None:
                teams = {e.job_id: (e.team, e.priority) for e in snap.queued}
            if i in teams:
                self._first[i] = (teams[i], snap.now, eta.predicted)
