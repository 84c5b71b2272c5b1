"""Replay a job trace through the live policy (``policy.plan``) on a virtual clock.

The simulator is the live loop with the database and Ray replaced by a few dicts: each tick
builds a ``policy.Snapshot`` and calls the same ``plan``; starts, preemptions and ends move
virtual time. The policy never sees ``duration_s`` (the job's work at full speed): it sees
what a live scheduler sees, the progress a running job reports (its step rate once it has
run ``report_delay_s``) and the user's ``max_runtime_s``. ``duration_s`` only decides when a
job finishes.

Preemption stops the victim at the tick (the live checkpoint-now takes a step); the work it
did since its last periodic checkpoint (every ``checkpoint_interval_s`` of work) is lost and
charged to it. ETAs: each job's first estimate (``policy.eta.estimate_starts``) is taken at
the tick it is submitted. Trace and output formats: ``docs/scheduling.md``.
"""

from __future__ import annotations

import bisect
import heapq
import math
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from service.policy.capacity import EPS, NodeFree, pack, place_gang, take
from service.policy.eta import (
    LONG_WAIT_S,
    Eta,
    EtaModel,
    RuntimeModel,
    estimate_ranges,
    estimate_starts,
    running_end,
)
from service.policy.fairshare import (
    advance_owed,
    decay_step,
    dominant_share,
    entitlements,
)
from service.policy.order import static_key
from service.policy.plan import PolicyConfig, plan
from service.policy.preemption import PreemptRules
from service.policy.queue_index import QueueIndex
from service.policy.snapshot import (
    ActiveJob,
    QueueEntry,
    Snapshot,
    TeamQuota,
    TeamState,
    queue_entry,
)
from service.scheduler.sim_report import Interval, summarize
from shunter.jobspec.vocab import priority_rank

__all__ = ["SimConfig", "SimJob", "SimTeam", "simulate"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_HISTORY = 200  # finished jobs per team the ETAs learn run times from
_NO_PREEMPT = PreemptRules(by_priority=False, by_fair_share=False, by_reservation=False)


@dataclass(frozen=True, kw_only=True)
class SimJob:
    """One trace line."""

    id: str
    team: str
    submit_s: float
    num_workers: int
    gpus_per_worker: float
    cpus_per_worker: float
    duration_s: float  # work at full speed: decides when it finishes, never read by policy
    max_runtime_s: float | None = None
    priority: str = "normal"
    preemptible: bool = True


@dataclass(frozen=True, kw_only=True)
class SimTeam:
    weight: float = 1.0
    quota_gpus: float | None = None
    quota_cpus: float | None = None
    max_priority: str = "high"


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    policy: str = "fair"
    tick_s: float = 60.0  # the scheduler's interval on the virtual clock
    checkpoint_interval_s: float = 600.0  # work between periodic checkpoints
    report_delay_s: float = 60.0  # run time before a job's step rate is known
    grace_s: float = 600.0
    min_runtime_s: float = 300.0
    # Half-life of the owed account and of the usage history (the live default): what a team
    # is owed is not forgotten within a trace of hours.
    half_life_s: float = 7 * 24 * 3600.0
    eta: bool = True
    # ETAs as the live loop gives them: only the first ``eta_depth`` queued jobs in policy
    # order get one (SHUNTER_SCHEDULER_MAX_PLAN_DEPTH's default); a job submitted deeper
    # takes its first estimate at a later ETA tick that finds it within the depth. ETA
    # ticks: a tick with a submit, and every ``eta_refresh_s`` while some queued job has
    # none. None: every job's first estimate is taken at its submit (the forward run over
    # the whole queue at every submit tick).
    eta_depth: int | None = 500
    eta_refresh_s: float = 600.0
    # The forward run as it was before issue 30 (every job to its max_runtime, no backfill,
    # no calibration, no p90): the baseline ``bench/eta_calibration.py`` measures against.
    eta_legacy: bool = False
    # Plan only at ticks where some decision could change (``_Sim._quiet``); the decisions
    # are the same as planning at every tick (tested), only faster.
    skip_quiet_ticks: bool = True


class _Shape(NamedTuple):
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float


@dataclass(kw_only=True)
class _State:
    job: SimJob
    priority: str
    done: float = 0.0  # work done and kept (up to now or the last stop)
    attempt_start: float | None = None
    attempt_done0: float = 0.0  # work done when this attempt started
    queued_since: float = 0.0
    run_s: float = 0.0  # run time of finished attempts
    runs: list[list[float]] = field(default_factory=list)
    preemptions: int = 0
    estimate: float | None = None
    estimate_p90: float | None = None
    estimated_at: float | None = None  # when the first estimate was made
    predicted: float | None = None  # the forward run's start then, before calibration
    finished: bool = False
    fits_ever: bool = True
    entry: QueueEntry | None = None  # the policy's view, kept until it changes (a stop)
    active: ActiveJob | None = None  # kept until its step rate is known
    rate_known: bool = False
    placement: list[str] = field(default_factory=list)


def _at(s: float) -> datetime:
    return EPOCH + timedelta(seconds=s)


def _secs(t: datetime) -> float:
    return (t - EPOCH).total_seconds()


class _Sim:
    def __init__(
        self,
        nodes: Sequence[Mapping[str, float]],
        teams: Mapping[str, SimTeam],
        jobs: Sequence[SimJob],
        cfg: SimConfig,
    ) -> None:
        self.cfg = cfg
        self.policy = PolicyConfig.named(
            cfg.policy, grace_s=cfg.grace_s, min_runtime_s=cfg.min_runtime_s
        )
        self.totals = [
            NodeFree(node_id=f"n{i}", cpus=float(n.get("cpus", 0)), gpus=float(n.get("gpus", 0)))
            for i, n in enumerate(nodes)
        ]
        self.total_cpus = sum(n.cpus for n in self.totals)
        self.total_gpus = sum(n.gpus for n in self.totals)
        self.teams = dict(teams)
        for j in jobs:
            self.teams.setdefault(j.team, SimTeam())
        self.pending = sorted(jobs, key=lambda j: (j.submit_s, j.id))
        self.state: dict[str, _State] = {}
        self.queued: list[str] = []  # in static order (class, waiting time, id)
        # The same jobs per team and shape, kept for the policy across ticks.
        self.index = QueueIndex(use_priority=self.policy.use_priority)
        self.running: list[str] = []  # in start order
        self.history: dict[str, tuple[float, float]] = {}  # team -> decayed (cpus, gpus)
        self.owed: dict[str, float] = {}  # team -> share-seconds owed (advance_owed)
        self.intervals: list[Interval] = []
        self.now = 0.0
        self.free = list(self.totals)  # what the running jobs leave, placed where they started
        # Per team, kept as jobs come and go (the clock reads them at every step):
        self.held: dict[str, list[float]] = {name: [0.0, 0.0] for name in self.teams}
        self.held_jobs: Counter[str] = Counter()  # team -> running jobs
        self.never_fits: dict[tuple[int, float, float], str | None] = {}  # for the policy
        self.fits: dict[tuple[int, float, float], bool] = {}  # shape -> fits the totals
        self.demand: dict[str, list[float]] = {}  # queued + running jobs that fit the cluster
        self.waiting: dict[str, int] = {}  # queued jobs that fit the cluster
        self.tick_s: list[float] = []  # the policy's decision time per tick (plan + ETAs)
        self.skipped = 0  # ticks at which nothing could change (not planned)
        self.shapes: dict[str, Counter[_Shape]] = {}  # team -> queued shapes that fit ever
        self.queued_teams: Counter[str] = Counter()  # every queued job, fits or not
        self._free: list[NodeFree] | None = None  # the packing of the running jobs
        self._placements: list[list[str] | None] = []  # and where it put each
        self._packed_all = True  # that packing placed every running job
        self.finishes: list[tuple[float, str, float]] = []  # heap: (end, job, attempt start)
        self.no_eta: set[str] = set()  # queued jobs without an estimate yet
        self.eta_at = -math.inf  # the last ETA tick
        # What the ETAs learn online from finished jobs (``policy.eta.RuntimeModel``): per
        # team, run time / max_runtime of the last ``_HISTORY`` finished, and the run times
        # of those without a limit.
        self.fractions: dict[str, deque[float]] = {}
        self.durations: dict[str, deque[float]] = {}
        # Started jobs' actual wait / the wait their first estimate predicted (the p90's
        # calibration, ``EtaModel.wait_ratios``).
        self.wait_ratios: dict[tuple[str, str], deque[float]] = {}

    # -- the policy's view ------------------------------------------------------------
    def _entry(self, st: _State) -> QueueEntry:
        if st.entry is None:
            st.entry = queue_entry(
                job_id=st.job.id,
                team=st.job.team,
                priority=st.priority,
                gang=st.job,
                created_at=_at(st.job.submit_s),
                queued_since=_at(st.queued_since),
                max_runtime_s=st.job.max_runtime_s,
                run_s=st.run_s,
                preemptible=st.job.preemptible,
            )
        return st.entry

    def _active(self, st: _State) -> ActiveJob:
        """Its expected end as the live loop reads it: max_runtime until the trainer has
        reported steps (``report_delay_s``), then the step rate, as measured at that moment.
        The same whenever it is asked (a skipped tick changes nothing)."""
        assert st.attempt_start is not None
        known = self.now - st.attempt_start >= self.cfg.report_delay_s
        if st.active is not None and st.rate_known == known:
            return st.active
        at, rate = st.attempt_start, None
        if known:  # the trainer has reported steps by now
            at = st.attempt_start + self.cfg.report_delay_s
            rate = (self._done_at(st, at) - st.attempt_done0) / self.cfg.report_delay_s
        end = running_end(
            now=_at(at),
            started_at=_at(st.attempt_start),
            steps_per_s=rate,
            steps_left=math.ceil(st.job.duration_s - self._done_at(st, at)),
            max_runtime_s=st.job.max_runtime_s,
            run_s_before=st.run_s,
        )
        st.active = ActiveJob(
            entry=self._entry(st), started_at=_at(st.attempt_start), expected_end_at=end
        )
        st.rate_known = known
        return st.active

    def _snapshot(self) -> Snapshot:
        teams = {
            name: TeamState(
                weight=t.weight,
                quota=TeamQuota(max_gpus=t.quota_gpus, max_cpus=t.quota_cpus),
                history_share=self._share(*self.history.get(name, (0.0, 0.0))),
                owed_s=self.owed.get(name, 0.0),
            )
            for name, t in self.teams.items()
        }
        free = self._packing()
        return Snapshot(
            now=_at(self.now),
            totals=self.totals,
            free=free,
            queued=_Queued(self, tuple(self.queued)),
            active=[self._active(self.state[i]) for i in self.running],
            teams=teams,
            index=self.index,
            active_packing=(free, self._placements),
            held={t: (self.held_jobs[t], h[0], h[1]) for t, h in self.held.items()},
            never_fits=self.never_fits,
        )

    def _packing(self) -> list[NodeFree]:
        """Free capacity: the node totals minus our packing of the running jobs, in start
        order (what ``capacity.free_now`` gives the live loop). Kept across ticks: a start
        packs one more job last (``pack`` is that loop, one gang at a time); a stop packs
        again only the jobs after the one that stopped, from what the jobs before it left
        (``_unpack``)."""
        if self._free is None:
            free, placements = pack(self.totals, [self.state[i].job for i in self.running])
            self._packed_all = all(p is not None for p in placements)
            self._free, self._placements = free, placements
        return self._free

    def _pack_started(self, job: SimJob) -> None:
        """``job`` started (last in start order): pack it onto the kept packing."""
        if self._free is None:
            return
        placement = place_gang(job, self._free)  # as ``pack`` places it, in O(nodes)
        if placement is not None:
            self._free = take(self._free, placement, job)
        self._placements.append(placement)
        self._packed_all = self._packed_all and placement is not None

    def _unpack(self, k: int, stopped: SimJob) -> None:
        """The running job at position ``k`` stopped (already out of ``running``): give
        back what it and every job after it were packed on, then pack those after it again
        in order, as a whole ``pack`` would from what the first ``k`` left."""
        if self._free is None:
            return
        placements = self._placements
        back: dict[str, list[float]] = {}
        for pos in range(k, len(placements)):
            pl = placements[pos]
            if pl is None:
                continue
            j = self.state[self.running[pos - 1]].job if pos > k else stopped
            for nid in pl:
                b = back.setdefault(nid, [0.0, 0.0])
                b[0] += j.cpus_per_worker
                b[1] += j.gpus_per_worker
        prefix = [
            NodeFree(
                node_id=n.node_id,
                cpus=n.cpus + back[n.node_id][0],
                gpus=n.gpus + back[n.node_id][1],
            )
            if n.node_id in back
            else n
            for n in self._free
        ]
        after = [self.state[i].job for i in self.running[k:]]
        free, again = pack(prefix, after)
        self._free = free
        self._placements = placements[:k] + again
        self._packed_all = all(p is not None for p in self._placements)

    def _quiet(self) -> bool:
        """True when planning now could neither start nor preempt anything, whatever the
        order (which the owed accounts move between ticks). Sound, not complete: each test
        below is implied by what ``policy.plan`` needs to start or preempt a job.

        - start: some queued shape fits the free capacity (free changes only at events);
        - priority preemption: a queued job of a higher class than a running preemptible one;
        - fair-share preemption: a team whose smallest queued job keeps it within its fair
          share, and another team above its share with a preemptible job running;
        - a reservation taken back (``reclaim_victims``): some queued job fits, by totals
          alone, once the running jobs that could be its borrowers, and those past their
          expected end, are gone."""
        free = self._packing()
        if not self._packed_all:
            return False
        shapes = {s for c in self.shapes.values() for s in c}
        if any(place_gang(s, free) is not None for s in shapes):
            return False
        rules = self.policy.preempt
        running = [self.state[i] for i in self.running]
        if rules.by_priority and self.queued:
            first = priority_rank(
                self.state[self.queued[0]].priority
            )  # the queue is in class order
            if any(st.job.preemptible and priority_rank(st.priority) > first for st in running):
                return False
        if rules.by_fair_share:
            demanding = set(+self.queued_teams) | {st.job.team for st in running}
            fair = entitlements({t: self.teams[t].weight for t in sorted(demanding)})
            shares = {t: self._share(*self.held.get(t, (0.0, 0.0))) for t in demanding}
            above = {st.job.team for st in running if st.job.preemptible} & {
                t for t in demanding if shares[t] > fair[t]
            }
            for team, c in self.shapes.items():
                smallest = min(
                    (
                        self._share(
                            s.num_workers * s.cpus_per_worker, s.num_workers * s.gpus_per_worker
                        )
                        for s in c
                    ),
                    default=None,
                )
                if smallest is None or shares[team] + smallest > fair[team] + 1e-9:
                    continue
                if above - {team}:
                    return False
        if self.policy.reservations and rules.by_reservation:
            seen: set[tuple[_Shape, int]] = set()
            for i in self.queued:  # class, then waiting time: each group's oldest first
                st = self.state[i]
                j = st.job
                group = (
                    _Shape(j.num_workers, j.cpus_per_worker, j.gpus_per_worker),
                    priority_rank(st.priority),
                )
                if not st.fits_ever or group in seen:
                    continue
                seen.add(group)
                cpus, gpus = self.total_cpus, self.total_gpus
                for r in running:
                    a = self._active(r)
                    gone = a.expected_end_at is not None and _secs(a.expected_end_at) <= self.now
                    borrower = (
                        r.job.preemptible
                        and (r.attempt_start or 0.0) > st.queued_since
                        and priority_rank(r.priority) >= group[1]
                    )
                    if not (gone or borrower):
                        cpus -= r.job.num_workers * r.job.cpus_per_worker
                        gpus -= r.job.num_workers * r.job.gpus_per_worker
                if (
                    cpus + EPS >= j.num_workers * j.cpus_per_worker
                    and gpus + EPS >= j.num_workers * j.gpus_per_worker
                ):
                    return False
        return True

    # -- job bookkeeping --------------------------------------------------------------
    def _done(self, st: _State) -> float:
        return self._done_at(st, self.now)

    def _done_at(self, st: _State, t: float) -> float:
        if st.attempt_start is None:
            return st.done
        return min(st.done + (t - st.attempt_start), st.job.duration_s)

    def _count(self, st: _State, *, held: int = 0, demand: int = 0, waiting: int = 0) -> None:
        j, team = st.job, st.job.team
        cpus, gpus = j.num_workers * j.cpus_per_worker, j.num_workers * j.gpus_per_worker
        h = self.held.setdefault(team, [0.0, 0.0])
        h[0] += held * cpus
        h[1] += held * gpus
        self.held_jobs[team] += held
        if st.fits_ever:
            d = self.demand.setdefault(team, [0.0, 0.0])
            d[0] += demand * cpus
            d[1] += demand * gpus
            self.waiting[team] = self.waiting.get(team, 0) + waiting
            if not self.waiting[team]:
                del self.waiting[team]
            shapes = self.shapes.setdefault(team, Counter())
            shapes[_Shape(j.num_workers, j.cpus_per_worker, j.gpus_per_worker)] += waiting
            self.shapes[team] = +shapes
            if d == [0.0, 0.0]:
                del self.demand[team]

    def _submit(self, j: SimJob) -> None:
        st = _State(job=j, priority=self._capped(j), queued_since=j.submit_s)
        shape = (j.num_workers, j.cpus_per_worker, j.gpus_per_worker)
        if shape not in self.fits:
            self.fits[shape] = place_gang(j, self.totals) is not None
        st.fits_ever = self.fits[shape]
        self.state[j.id] = st
        self.no_eta.add(j.id)
        self._enqueue(st)
        self._count(st, demand=1, waiting=1)

    def _enqueue(self, st: _State) -> None:
        """The queue is kept in the policy's static order (class, waiting time, id) across
        ticks, so ordering it each tick is a linear pass over sorted input."""
        self.queued_teams[st.job.team] += 1
        self.index.add(self._entry(st))
        key = static_key(self._entry(st), use_priority=True)
        at = bisect.bisect(
            self.queued,
            key,
            key=lambda i: static_key(self._entry(self.state[i]), use_priority=True),
        )
        self.queued.insert(at, st.job.id)

    def _start(self, job_id: str, placement: list[str]) -> None:
        st = self.state[job_id]
        if not st.runs and st.predicted is not None and st.estimated_at is not None:
            predicted = st.predicted - st.estimated_at
            if predicted >= LONG_WAIT_S:
                key = (st.job.team, st.priority)
                self.wait_ratios.setdefault(key, deque(maxlen=_HISTORY)).append(
                    (self.now - st.estimated_at) / predicted
                )
        st.attempt_start = self.now
        st.attempt_done0 = st.done
        st.placement = list(placement)
        self.free = take(self.free, placement, st.job)
        self.queued.remove(job_id)
        self.no_eta.discard(job_id)
        self.index.remove(self._entry(st))
        self.queued_teams[st.job.team] -= 1
        self.running.append(job_id)
        self._pack_started(st.job)
        heapq.heappush(self.finishes, (self._finish_time(job_id), job_id, self.now))
        self._count(st, held=1, waiting=-1)

    def _stop(self, job_id: str, *, finished: bool) -> None:
        st = self.state[job_id]
        assert st.attempt_start is not None
        done = self._done(st)
        st.runs.append([st.attempt_start, self.now])
        st.run_s += self.now - st.attempt_start
        back = {nid: st.placement.count(nid) for nid in set(st.placement)}
        self.free = [
            NodeFree(
                node_id=n.node_id,
                cpus=n.cpus + back[n.node_id] * st.job.cpus_per_worker,
                gpus=n.gpus + back[n.node_id] * st.job.gpus_per_worker,
            )
            if n.node_id in back
            else n  # untouched nodes are kept, not rebuilt
            for n in self.free
        ]
        st.attempt_start, st.active, st.entry, st.placement = None, None, None, []
        k = self.running.index(job_id)
        del self.running[k]
        self._unpack(k, st.job)
        # What the ETAs learn: how long an attempt held its capacity (to its end or its
        # preemption), / max_runtime.
        limit, team = st.job.max_runtime_s, st.job.team
        held_s = st.runs[-1][1] - st.runs[-1][0]
        if limit:
            self.fractions.setdefault(team, deque(maxlen=_HISTORY)).append(min(held_s / limit, 1.0))
        else:
            self.durations.setdefault(team, deque(maxlen=_HISTORY)).append(held_s)
        if finished:
            st.done, st.finished = st.job.duration_s, True
            self._count(st, held=-1, demand=-1)
        else:  # preempted: keep the work up to the last periodic checkpoint
            every = self.cfg.checkpoint_interval_s
            st.done = math.floor(done / every) * every if every > 0 else done
            st.preemptions += 1
            st.queued_since = self.now
            self._enqueue(st)
            self._count(st, held=-1, waiting=1)

    def _finish_time(self, job_id: str) -> float:
        """When the attempt ends: its work is done, or max_runtime (across attempts) is up."""
        st = self.state[job_id]
        assert st.attempt_start is not None
        end = st.attempt_start + (st.job.duration_s - st.done)
        if st.job.max_runtime_s is not None:
            end = min(end, st.attempt_start + max(st.job.max_runtime_s - st.run_s, 0.0))
        return end

    # -- the clock --------------------------------------------------------------------
    def _advance(self, to: float) -> None:
        dt = to - self.now
        if dt <= 0:
            return
        held = self.held
        for team, (cpus, gpus) in held.items():
            hc, hg = self.history.get(team, (0.0, 0.0))
            self.history[team] = (
                decay_step(hc, cpus, dt_s=dt, half_life_s=self.cfg.half_life_s),
                decay_step(hg, gpus, dt_s=dt, half_life_s=self.cfg.half_life_s),
            )
        demand = self.demand
        waiting_teams = frozenset(self.waiting)
        self.owed = advance_owed(
            self.owed,
            held={t: self._share(*h) for t, h in held.items()},
            demand={t: self._share(*d) for t, d in demand.items()},
            waiting=waiting_teams,
            weights={t: s.weight for t, s in self.teams.items()},
            dt_s=dt,
            half_life_s=self.cfg.half_life_s,
        )
        self.intervals.append(
            Interval(
                start_s=self.now,
                end_s=to,
                held={t: (c, g) for t, (c, g) in held.items()},
                demand={t: (c, g) for t, (c, g) in demand.items()},
                waiting=sum(self.waiting.values()),
                waiting_teams=waiting_teams,
            )
        )
        self.now = to

    def _share(self, cpus: float, gpus: float) -> float:
        return dominant_share(cpus, gpus, total_cpus=self.total_cpus, total_gpus=self.total_gpus)

    def run(self) -> None:
        nxt = 0
        while nxt < len(self.pending) or self.queued or self.running:
            while (
                self.finishes
                and self.state[self.finishes[0][1]].attempt_start != self.finishes[0][2]
            ):
                heapq.heappop(self.finishes)  # that attempt was preempted
            candidates = [self.finishes[0][0]] if self.finishes else []
            if nxt < len(self.pending):
                candidates.append(self.pending[nxt].submit_s)
            if self.queued and self.running:  # only ticks while something can change
                candidates.append(self.now + self.cfg.tick_s)
            if not candidates:
                break  # queued jobs that can never start (larger than the cluster)
            self._advance(max(min(candidates), self.now))
            ended = []
            while self.finishes and self.finishes[0][0] <= self.now + 1e-9:
                _, i, started = heapq.heappop(self.finishes)
                if self.state[i].attempt_start == started:
                    ended.append(i)
            for i in sorted(ended, key=self.running.index):  # in start order, as before
                self._stop(i, finished=True)
            new: list[str] = []
            while nxt < len(self.pending) and self.pending[nxt].submit_s <= self.now:
                j = self.pending[nxt]
                nxt += 1
                self._submit(j)
                new.append(j.id)
            if ended or new or not self.cfg.skip_quiet_ticks or not self._quiet():
                self._tick(new)
            else:
                self.skipped += 1

    def _capped(self, j: SimJob) -> str:
        """A priority above the team's max_priority is refused live (403); here, capped."""
        cap = self.teams[j.team].max_priority
        return cap if priority_rank(j.priority) < priority_rank(cap) else j.priority

    def _tick(self, new: Sequence[str]) -> None:
        t0 = time.perf_counter()
        snap = self._snapshot()
        depth = self.cfg.eta_depth
        eta = self.cfg.eta and (
            bool(new)
            or (
                depth is not None
                and bool(self.no_eta)
                and self.now >= self.eta_at + self.cfg.eta_refresh_s
            )
        )
        # The pass stops once nothing more can start; with ETAs to take, it carries on
        # ordering (no decisions) the jobs behind up to the depth, for the forward run.
        p = plan(snap, self.policy, complete=False, order_depth=depth if eta else 0)
        if eta:
            self.eta_at = self.now
            want = (
                list(new)
                if depth is None
                else [e.job_id for e in p.in_order()[:depth] if e.job_id in self.no_eta]
            )
            model = EtaModel(
                runtime=RuntimeModel(
                    fractions={t: tuple(v) for t, v in self.fractions.items()},
                    durations={t: tuple(v) for t, v in self.durations.items()},
                ),
                wait_ratios={t: tuple(v) for t, v in self.wait_ratios.items()},
            )
            if self.cfg.eta_legacy:
                etas = {
                    i: Eta(t, t, t) for i, t in estimate_starts(snap, plan_now=p, want=want).items()
                }
            else:
                etas = estimate_ranges(snap, plan_now=p, model=model, want=want)
            for i in want:
                if i in etas:
                    self.state[i].estimate = _secs(etas[i].start)
                    self.state[i].estimate_p90 = _secs(etas[i].p90)
                    self.state[i].predicted = _secs(etas[i].predicted)
                    self.state[i].estimated_at = self.now
                    self.no_eta.discard(i)
        if p.preemptions:
            for v in p.preemptions:
                self._stop(v.victim.job_id, finished=False)
            # The victims' capacity is free now: plan again so the job they made room for
            # starts at this tick (live, it starts once the victims have checkpointed).
            p = plan(self._snapshot(), replace(self.policy, preempt=_NO_PREEMPT), complete=False)
        for d in p.starts:
            self._start(d.entry.job_id, d.placement)
        self.tick_s.append(time.perf_counter() - t0)

    def result(self) -> dict[str, Any]:
        jobs = [
            {
                "id": st.job.id,
                "team": st.job.team,
                "submit_s": st.job.submit_s,
                "runs": st.runs,
                "preemptions": st.preemptions,
                "estimated_start_s": st.estimate,
                "estimated_start_p90_s": st.estimate_p90,
            }
            for st in sorted(self.state.values(), key=lambda s: (s.job.submit_s, s.job.id))
        ]
        summary = summarize(
            jobs,
            self.intervals,
            weights={t: s.weight for t, s in self.teams.items()},
            total_cpus=self.total_cpus,
            total_gpus=self.total_gpus,
        )
        return {
            "jobs": jobs,
            "summary": {
                "policy": self.cfg.policy,
                **summary,
                "decision_s": {**_spread(self.tick_s), "skipped_ticks": self.skipped},
            },
        }


class _Queued(Sequence[QueueEntry]):
    """The queued jobs' entries as the snapshot's ``queued``, built only if read (the
    policy reads the simulator's ``QueueIndex``); valid until the simulator moves on."""

    def __init__(self, sim: _Sim, ids: tuple[str, ...]) -> None:
        self.sim, self.ids = sim, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> QueueEntry:  # type: ignore[override]
        return self.sim._entry(self.sim.state[self.ids[i]])

    def __iter__(self) -> Iterator[QueueEntry]:
        return (self.sim._entry(self.sim.state[i]) for i in self.ids)


def _spread(xs: Sequence[float]) -> dict[str, float | int]:
    """p50, p99 and max of the policy's decision time per tick (wall seconds)."""
    s = sorted(xs)
    if not s:
        return {"ticks": 0, "p50": 0.0, "p99": 0.0, "max": 0.0}

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))], 6)

    return {"ticks": len(s), "p50": at(0.5), "p99": at(0.99), "max": round(s[-1], 6)}


def simulate(
    *,
    nodes: Sequence[Mapping[str, float]],
    teams: Mapping[str, SimTeam],
    jobs: Sequence[SimJob],
    cfg: SimConfig | None = None,
) -> dict[str, Any]:
    """Replay ``jobs`` on ``nodes``; ``{"jobs": [...], "summary": {...}}``."""
    sim = _Sim(nodes, teams, jobs, cfg or SimConfig())
    sim.run()
    return sim.result()
