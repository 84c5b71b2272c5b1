"""Replay a job trace through the live policy (``policy.planner``) on a virtual clock.

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
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from service.policy.capacity import NodeFree, pack, place_gang, take
from service.policy.elastic import (
    RESIZE_GROW,
    RESIZE_RECLAIM,
    RESIZE_SHRINK,
    RESIZE_START,
)
from service.policy.elastic import decide as decide_resizes
from service.policy.eta import (
    LONG_WAIT_S,
    Eta,
    EtaModel,
    RuntimeModel,
    estimate_ranges,
    estimate_starts,
    running_end,
)
from service.policy.fairshare import decay_step
from service.policy.order import static_key
from service.policy.planner import PolicyConfig, plan
from service.policy.preemption import PreemptRules
from service.policy.queue_index import QueueIndex
from service.policy.snapshot import (
    ActiveJob,
    Snapshot,
    TeamQuota,
    TeamState,
)
from service.sim.model import (
    FirstWait,
    JobState,
    QueuedView,
    Shape,
    SimConfig,
    SimJob,
    SimTeam,
    cluster_of,
    resolve_types,
)
from service.sim.model import at as _at
from service.sim.model import secs as _secs
from service.sim.outcome import outcome
from service.sim.quiet import QuietCheck
from service.sim.report import Interval
from service.sim.tallies import Tallies

__all__ = ["SimConfig", "SimJob", "SimTeam", "simulate"]

_HISTORY = 200  # finished jobs per team the ETAs learn run times from
_NO_PREEMPT = PreemptRules(by_priority=False, by_fair_share=False, by_reservation=False)


class _Sim(Tallies, QuietCheck):
    def __init__(
        self,
        nodes: Sequence[Mapping[str, Any]],
        teams: Mapping[str, SimTeam],
        jobs: Sequence[SimJob],
        cfg: SimConfig,
    ) -> None:
        self.cfg = cfg
        self.policy = PolicyConfig.named(
            cfg.policy, grace_s=cfg.grace_s, min_runtime_s=cfg.min_runtime_s
        )
        self.totals, self.catalog = cluster_of(nodes)
        self.node_type = {n.node_id: n.accelerator for n in self.totals}
        jobs, self.rejected = resolve_types(jobs, self.catalog)
        self.total_cpus = sum(n.cpus for n in self.totals)
        self.total_gpus = sum(n.gpus for n in self.totals)
        weights = cfg.type_weights or {t: c.weight for t, c in self.catalog.items()}
        self._typed_init(self.totals, weights)  # fair shares per type (a mixed cluster)
        self.teams = dict(teams)
        for j in jobs:
            self.teams.setdefault(j.team, SimTeam())
        self.pending = sorted(jobs, key=lambda j: (j.submit_s, j.id))
        self.state: dict[str, JobState] = {}
        self.queued: list[str] = []  # in static order (class, waiting time, id)
        # The same jobs per team and shape, kept for the policy across ticks.
        self.index = QueueIndex(use_priority=self.policy.use_priority)
        self.running: list[str] = []  # in start order
        self.history: dict[str, tuple[float, float]] = {}  # team -> decayed (cpus, gpus)
        self.owed: dict[str, float] = {}  # team -> share-seconds owed (_owed_step)
        self.intervals: list[Interval] = []
        self.now = 0.0
        self.free = list(self.totals)  # what the running jobs leave, placed where they started
        # Per team, kept as jobs come and go (the clock reads them at every step):
        self.held: dict[str, list[float]] = {name: [0.0, 0.0] for name in self.teams}
        self.held_jobs: Counter[str] = Counter()  # team -> running jobs
        self.never_fits: dict[tuple[int, float, float, tuple[str, ...]], str | None] = {}
        # shape -> fits the totals
        self.fits: dict[tuple[int, float, float, tuple[str, ...]], bool] = {}
        self.demand: dict[str, list[float]] = {}  # queued + running jobs that fit the cluster
        self.waiting: dict[str, int] = {}  # queued jobs that fit the cluster
        self.tick_s: list[float] = []  # the policy's decision time per tick (plan + ETAs)
        self.skipped = 0  # ticks at which nothing could change (not planned)
        self.shapes: dict[str, Counter[Shape]] = {}  # team -> queued shapes that fit ever
        self.queued_teams: Counter[str] = Counter()  # every queued job, fits or not
        self._free: list[NodeFree] | None = None  # the packing of the running jobs
        self._placements: list[list[str] | None] = []  # and where it put each
        self.narrow: set[str] = set()  # running elastic jobs below their max (grow ticks)
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
        self.first_wait: dict[str, FirstWait] = {}  # and those still waiting: their bounds
        self.eta_checks: deque[tuple[float, float]] = deque(maxlen=_HISTORY)  # EtaModel.checks

    # -- the policy's view ------------------------------------------------------------
    def _active(self, st: JobState) -> ActiveJob:
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
            rate = (st.done_at(at) - st.attempt_done0) / self.cfg.report_delay_s
        end = running_end(
            now=_at(at),
            started_at=_at(st.attempt_start),
            steps_per_s=rate,
            steps_left=math.ceil(st.job.duration_s - st.done_at(at)),
            max_runtime_s=st.job.max_runtime_s,
            run_s_before=st.run_s,
        )
        st.active = ActiveJob(
            entry=st.policy_entry(),
            started_at=_at(st.attempt_start),
            expected_end_at=end,
            accelerator=self.node_type.get(st.placement[0], "") if st.placement else "",
        )
        st.rate_known = known
        return st.active

    def _snapshot(self) -> Snapshot:
        teams = {
            name: TeamState(
                weight=t.weight,
                quota=TeamQuota(
                    max_gpus=t.quota_gpus,
                    max_cpus=t.quota_cpus,
                    max_gpus_by_type=t.quota_gpus_by_type,
                ),
                history_share=self._share(
                    *self.history.get(name, (0.0, 0.0)), by_type=self.history_t.get(name)
                ),
                owed_s=self.owed.get(name, 0.0),
            )
            for name, t in self.teams.items()
        }
        free = self._packing()
        return Snapshot(
            now=_at(self.now),
            totals=self.totals,
            free=free,
            queued=QueuedView(self.state, tuple(self.queued)),
            active=[self._active(self.state[i]) for i in self.running],
            teams=teams,
            index=self.index,
            active_packing=(free, self._placements),
            held={t: (self.held_jobs[t], h[0], h[1]) for t, h in self.held.items()},
            never_fits=self.never_fits,
            type_weights=self.type_weights,
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
                accelerator=n.accelerator,
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

    # -- job bookkeeping --------------------------------------------------------------
    def _submit(self, j: SimJob) -> None:
        queued = j if j.min_workers is None else replace(j, num_workers=j.min_workers)
        st = JobState(
            job=queued,
            line=j,
            priority=self.teams[j.team].capped(j.priority),
            queued_since=j.submit_s,
        )
        j = queued
        shape = (j.num_workers, j.cpus_per_worker, j.gpus_per_worker, j.accelerators)
        if shape not in self.fits:
            self.fits[shape] = place_gang(j, self.totals) is not None
        st.fits_ever = self.fits[shape]
        self.state[j.id] = st
        self.no_eta.add(j.id)
        self._enqueue(st)
        self._count(st, demand=1, waiting=1)

    def _enqueue(self, st: JobState) -> None:
        """The queue is kept in the policy's static order (class, waiting time, id) across
        ticks, so ordering it each tick is a linear pass over sorted input."""
        self.queued_teams[st.job.team] += 1
        self.index.add(st.policy_entry())
        key = static_key(st.policy_entry(), use_priority=True)
        at = bisect.bisect(
            self.queued,
            key,
            key=lambda i: static_key(self.state[i].policy_entry(), use_priority=True),
        )
        self.queued.insert(at, st.job.id)

    def _start(self, job_id: str, placement: list[str], width: int | None = None) -> None:
        st = self.state[job_id]
        self.first_wait.pop(job_id, None)
        if not st.runs and st.predicted is not None and st.estimated_at is not None:
            predicted = st.predicted - st.estimated_at
            if predicted >= LONG_WAIT_S:
                key = (st.job.team, st.priority)
                waited = self.now - st.estimated_at
                self.wait_ratios.setdefault(key, deque(maxlen=_HISTORY)).append(waited / predicted)
                if waited >= LONG_WAIT_S:
                    self.eta_checks.append((waited / predicted, st.scale))
        st.attempt_start = self.now
        st.attempt_done0 = st.done
        self.queued.remove(job_id)
        self.no_eta.discard(job_id)
        self.index.remove(st.policy_entry())
        self.queued_teams[st.job.team] -= 1
        job = st.job if width is None else replace(st.line, num_workers=width)
        wider = None
        if job.num_workers != st.job.num_workers:  # an elastic job, wider
            wider = place_gang(job, self._packing())
        if wider is None:
            self._count(st, held=1, waiting=-1)
        else:
            self._count(st, waiting=-1, demand=-1)
            st.job, st.entry, placement = job, None, wider
            st.resizes.append((self.now, st.job.num_workers, "start"))
            self._count(st, held=1, demand=1)
        self._run(st, placement)

    def _run(self, st: JobState, placement: list[str]) -> None:
        """Put ``st`` (its attempt started now) on ``placement``: the running side."""
        job_id = st.job.id
        st.placement = list(placement)
        self._on_nodes(st, 1.0)
        self.free = take(self.free, placement, st.job)
        self.running.append(job_id)
        self._pack_started(st.job)
        heapq.heappush(self.finishes, (self._finish_time(job_id), job_id, self.now))
        if st.job.num_workers < st.line.num_workers:
            self.narrow.add(job_id)

    def _release(self, st: JobState) -> None:
        """Give back what ``st`` holds (its attempt ends now) and record the run."""
        assert st.attempt_start is not None
        st.runs.append([st.attempt_start, self.now])
        if st.placement:
            gpus = st.job.num_workers * st.job.gpus_per_worker
            st.run_types.append((self.node_type.get(st.placement[0], ""), gpus))
        st.run_s += self.now - st.attempt_start
        self._on_nodes(st, -1.0)
        back = {nid: st.placement.count(nid) for nid in set(st.placement)}
        self.free = [
            NodeFree(
                node_id=n.node_id,
                cpus=n.cpus + back[n.node_id] * st.job.cpus_per_worker,
                gpus=n.gpus + back[n.node_id] * st.job.gpus_per_worker,
                accelerator=n.accelerator,
            )
            if n.node_id in back
            else n  # untouched nodes are kept, not rebuilt
            for n in self.free
        ]
        st.attempt_start, st.active, st.entry, st.placement = None, None, None, []
        k = self.running.index(st.job.id)
        del self.running[k]
        self.narrow.discard(st.job.id)
        self._unpack(k, st.job)

    def _resize(self, job_id: str, to: int, kind: str) -> None:
        """Checkpoint now (no work lost) and run again on ``to`` workers at once (what it
        released and what the plan found free make room; if packing finds none, narrower,
        down to min, else it queues)."""
        st = self.state[job_id]
        done = st.done_at(self.now)
        self._release(st)
        self._count(st, held=-1, demand=-1)
        st.done, st.attempt_done0 = done, done
        lo = st.line.min_workers or st.line.num_workers
        for w in range(to, lo - 1, -1):
            job = replace(st.line, num_workers=w)
            placement = place_gang(job, self._packing())
            if placement is not None:
                st.job = job
                st.resizes.append((self.now, w, kind))
                st.attempt_start = self.now
                self._count(st, held=1, demand=1)
                self._run(st, placement)
                return
        st.job = replace(st.line, num_workers=lo)
        st.queued_since = self.now
        self._enqueue(st)
        self._count(st, demand=1, waiting=1)

    def _stop(self, job_id: str, *, finished: bool) -> None:
        st = self.state[job_id]
        assert st.attempt_start is not None
        done = st.done_at(self.now)
        self._release(st)
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
            if st.job is not st.line and st.job.num_workers != st.line.min_workers:
                self._count(st, held=-1, demand=-1)  # an elastic job queues at min again
                st.job = replace(st.line, num_workers=st.line.min_workers or 1)
                self._enqueue(st)
                self._count(st, demand=1, waiting=1)
            else:
                self._enqueue(st)
                self._count(st, held=-1, waiting=1)

    def _finish_time(self, job_id: str) -> float:
        """When the attempt ends: its work is done, or max_runtime (across attempts) is up."""
        st = self.state[job_id]
        assert st.attempt_start is not None
        end = st.attempt_start + (st.job.duration_s - st.done) / st.rate
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
        self._decay_typed(dt, self.cfg.half_life_s)
        demand = self.demand
        waiting_teams = frozenset(self.waiting)
        shares = self._owed_step(held, demand, waiting_teams, dt, self.cfg.half_life_s)
        self.intervals.append(
            Interval(
                start_s=self.now,
                end_s=to,
                held={t: (c, g) for t, (c, g) in held.items()},
                demand={t: (c, g) for t, (c, g) in demand.items()},
                waiting=sum(self.waiting.values()),
                waiting_teams=waiting_teams,
                shares=shares,
            )
        )
        self.now = to

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
            if (self.queued and self.running) or self.narrow:  # while something can change
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
                waiting=FirstWait.bounds(self.first_wait.values(), self.now),
                checks=tuple(self.eta_checks),
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
                    self.state[i].scale = etas[i].scale
                    self.state[i].estimated_at = self.now
                    self.no_eta.discard(i)
                    FirstWait.keep(self.first_wait, self.state[i], self.now)
        rs = decide_resizes(snap, p, min_runtime_s=self.cfg.min_runtime_s)
        shrinks = [r for r in rs.resizes if r.kind in (RESIZE_SHRINK, RESIZE_RECLAIM)]
        if rs.preemptions or shrinks:
            for v in rs.preemptions:
                self._stop(v.victim.job_id, finished=False)
            for r in shrinks:
                self._resize(r.job_id, r.to, r.kind)
            # The victims' capacity is free now: plan again so the job they made room for
            # starts at this tick (live, it starts once the victims have checkpointed).
            snap = self._snapshot()
            p = plan(snap, replace(self.policy, preempt=_NO_PREEMPT), complete=False)
            rs = decide_resizes(snap, p, min_runtime_s=self.cfg.min_runtime_s)
        widths = {r.job_id: r.to for r in rs.resizes if r.kind == RESIZE_START}
        for d in p.starts:
            self._start(d.entry.job_id, d.placement, widths.get(d.entry.job_id))
        for r in rs.resizes:
            if r.kind == RESIZE_GROW:
                self._resize(r.job_id, r.to, r.kind)
        self.tick_s.append(time.perf_counter() - t0)

    def result(self) -> dict[str, Any]:
        return outcome(
            cfg=self.cfg,
            states=self.state,
            intervals=self.intervals,
            teams=self.teams,
            total_cpus=self.total_cpus,
            total_gpus=self.total_gpus,
            tick_s=self.tick_s,
            skipped=self.skipped,
            catalog=self.catalog,
            rejected=self.rejected,
        )


def simulate(
    *,
    nodes: Sequence[Mapping[str, Any]],
    teams: Mapping[str, SimTeam],
    jobs: Sequence[SimJob],
    cfg: SimConfig | None = None,
) -> dict[str, Any]:
    """Replay ``jobs`` on ``nodes``; ``{"jobs": [...], "summary": {...}}``."""
    sim = _Sim(nodes, teams, jobs, cfg or SimConfig())
    sim.run()
    return sim.result()
