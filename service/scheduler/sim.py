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

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from service.scheduler.policy.capacity import NodeFree, place_gang, take
from service.scheduler.policy.eta import estimate_starts, running_end
from service.scheduler.policy.fairshare import advance_owed, decay_step, dominant_share
from service.scheduler.policy.plan import PolicyConfig, plan
from service.scheduler.policy.preemption import PreemptRules
from service.scheduler.policy.snapshot import (
    PRIORITY_RANK,
    ActiveJob,
    QueueEntry,
    Snapshot,
    TeamQuota,
    TeamState,
)
from service.scheduler.sim_report import Interval, summarize

__all__ = ["SimConfig", "SimJob", "SimTeam", "simulate"]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
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
    finished: bool = False


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
        self.queued: list[str] = []
        self.running: list[str] = []  # in start order
        self.history: dict[str, tuple[float, float]] = {}  # team -> decayed (cpus, gpus)
        self.owed: dict[str, float] = {}  # team -> share-seconds owed (advance_owed)
        self.intervals: list[Interval] = []
        self.now = 0.0

    # -- the policy's view ------------------------------------------------------------
    def _entry(self, st: _State) -> QueueEntry:
        j = st.job
        return QueueEntry(
            job_id=j.id,
            team=j.team,
            priority=st.priority,
            created_at=_at(j.submit_s),
            num_workers=j.num_workers,
            cpus_per_worker=j.cpus_per_worker,
            gpus_per_worker=j.gpus_per_worker,
            queued_since=_at(st.queued_since),
            max_runtime_s=j.max_runtime_s,
            run_s=st.run_s,
            preemptible=j.preemptible,
        )

    def _active(self, st: _State) -> ActiveJob:
        assert st.attempt_start is not None
        elapsed = self.now - st.attempt_start
        rate = None
        if elapsed >= self.cfg.report_delay_s:  # the trainer has reported steps by now
            rate = (self._done(st) - st.attempt_done0) / elapsed
        end = running_end(
            now=_at(self.now),
            started_at=_at(st.attempt_start),
            steps_per_s=rate,
            steps_left=math.ceil(st.job.duration_s - self._done(st)),
            max_runtime_s=st.job.max_runtime_s,
            run_s_before=st.run_s,
        )
        return ActiveJob(
            entry=self._entry(st), started_at=_at(st.attempt_start), expected_end_at=end
        )

    def _snapshot(self) -> Snapshot:
        active = [self._active(self.state[i]) for i in self.running]
        free = list(self.totals)
        for a in active:
            placement = place_gang(a.entry, free)
            if placement is not None:
                free = take(free, placement, a.entry)
        teams = {
            name: TeamState(
                weight=t.weight,
                quota=TeamQuota(max_gpus=t.quota_gpus, max_cpus=t.quota_cpus),
                history_share=self._share(*self.history.get(name, (0.0, 0.0))),
                owed_s=self.owed.get(name, 0.0),
            )
            for name, t in self.teams.items()
        }
        queued = [self._entry(self.state[i]) for i in self.queued]
        return Snapshot(
            now=_at(self.now),
            totals=self.totals,
            free=free,
            queued=queued,
            active=active,
            teams=teams,
        )

    # -- job bookkeeping --------------------------------------------------------------
    def _done(self, st: _State) -> float:
        if st.attempt_start is None:
            return st.done
        return min(st.done + (self.now - st.attempt_start), st.job.duration_s)

    def _start(self, job_id: str) -> None:
        st = self.state[job_id]
        st.attempt_start = self.now
        st.attempt_done0 = st.done
        self.queued.remove(job_id)
        self.running.append(job_id)

    def _stop(self, job_id: str, *, finished: bool) -> None:
        st = self.state[job_id]
        assert st.attempt_start is not None
        done = self._done(st)
        st.runs.append([st.attempt_start, self.now])
        st.run_s += self.now - st.attempt_start
        if finished:
            st.done, st.finished = st.job.duration_s, True
        else:  # preempted: keep the work up to the last periodic checkpoint
            every = self.cfg.checkpoint_interval_s
            st.done = math.floor(done / every) * every if every > 0 else done
            st.preemptions += 1
            st.queued_since = self.now
            self.queued.append(job_id)
        st.attempt_start = None
        self.running.remove(job_id)

    def _fits_ever(self, job_id: str) -> bool:
        return place_gang(self.state[job_id].job, self.totals) is not None

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
        held: dict[str, list[float]] = {name: [0.0, 0.0] for name in self.teams}
        for i in self.running:
            j = self.state[i].job
            held[j.team][0] += j.num_workers * j.cpus_per_worker
            held[j.team][1] += j.num_workers * j.gpus_per_worker
        for team, (cpus, gpus) in held.items():
            hc, hg = self.history.get(team, (0.0, 0.0))
            self.history[team] = (
                decay_step(hc, cpus, dt_s=dt, half_life_s=self.cfg.half_life_s),
                decay_step(hg, gpus, dt_s=dt, half_life_s=self.cfg.half_life_s),
            )
        demand: dict[str, list[float]] = {}
        for i in (*self.queued, *self.running):
            if not self._fits_ever(i):  # a job larger than the cluster is no demand on it
                continue
            j = self.state[i].job
            d = demand.setdefault(j.team, [0.0, 0.0])
            d[0] += j.num_workers * j.cpus_per_worker
            d[1] += j.num_workers * j.gpus_per_worker
        waiting = [i for i in self.queued if self._fits_ever(i)]
        waiting_teams = frozenset(self.state[i].job.team for i in waiting)
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
                waiting=len(waiting),
                waiting_teams=waiting_teams,
            )
        )
        self.now = to

    def _share(self, cpus: float, gpus: float) -> float:
        return dominant_share(cpus, gpus, total_cpus=self.total_cpus, total_gpus=self.total_gpus)

    def run(self) -> None:
        nxt = 0
        while nxt < len(self.pending) or self.queued or self.running:
            candidates = [self._finish_time(i) for i in self.running]
            if nxt < len(self.pending):
                candidates.append(self.pending[nxt].submit_s)
            if self.queued and self.running:  # only ticks while something can change
                candidates.append(self.now + self.cfg.tick_s)
            if not candidates:
                break  # queued jobs that can never start (larger than the cluster)
            self._advance(max(min(candidates), self.now))
            for i in list(self.running):
                if self._finish_time(i) <= self.now + 1e-9:
                    self._stop(i, finished=True)
            new: list[str] = []
            while nxt < len(self.pending) and self.pending[nxt].submit_s <= self.now:
                j = self.pending[nxt]
                nxt += 1
                self.state[j.id] = _State(job=j, priority=self._capped(j), queued_since=j.submit_s)
                self.queued.append(j.id)
                new.append(j.id)
            self._tick(new)

    def _capped(self, j: SimJob) -> str:
        """A priority above the team's max_priority is refused live (403); here, capped."""
        cap = self.teams[j.team].max_priority
        return cap if PRIORITY_RANK.get(j.priority, 1) < PRIORITY_RANK.get(cap, 1) else j.priority

    def _tick(self, new: Sequence[str]) -> None:
        snap = self._snapshot()
        if new and self.cfg.eta:
            etas = estimate_starts(snap, self.policy, want=new)
            for i in new:
                if i in etas:
                    self.state[i].estimate = _secs(etas[i])
        p = plan(snap, self.policy)
        if p.preemptions:
            for v in p.preemptions:
                self._stop(v.victim.job_id, finished=False)
            # The victims' capacity is free now: plan again so the job they made room for
            # starts at this tick (live, it starts once the victims have checkpointed).
            p = plan(self._snapshot(), replace(self.policy, preempt=_NO_PREEMPT))
        for d in p.starts:
            self._start(d.entry.job_id)

    def result(self) -> dict[str, Any]:
        jobs = [
            {
                "id": st.job.id,
                "team": st.job.team,
                "submit_s": st.job.submit_s,
                "runs": st.runs,
                "preemptions": st.preemptions,
                "estimated_start_s": st.estimate,
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
        return {"jobs": jobs, "summary": {"policy": self.cfg.policy, **summary}}


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
