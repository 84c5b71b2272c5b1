"""The simulator's quiet ticks: when planning now could neither start nor preempt anything,
the engine skips the tick (``SimConfig.skip_quiet_ticks``; the decisions are the same as
planning at every tick, tested). A mixin of ``service.sim.engine._Sim``: it reads the
engine's state, declared below, and three of its methods.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace

from service.policy.capacity import EPS, NodeFree, place_gang
from service.policy.fairshare import GpuTypes, dominant_share, entitlements
from service.policy.planner import PolicyConfig
from service.policy.snapshot import ActiveJob
from service.sim.model import JobState, Shape, SimTeam, secs
from shunter.jobspec.vocab import priority_rank

__all__ = ["QuietCheck"]


class QuietCheck:
    state: dict[str, JobState]
    queued: list[str]  # in static order (class, waiting time, id)
    running: list[str]
    narrow: set[str]
    shapes: dict[str, Counter[Shape]]
    queued_teams: Counter[str]
    teams: dict[str, SimTeam]
    held: dict[str, list[float]]
    total_cpus: float
    total_gpus: float
    now: float
    policy: PolicyConfig
    _packed_all: bool

    def _packing(self) -> list[NodeFree]:
        raise NotImplementedError

    def _active(self, st: JobState) -> ActiveJob:
        raise NotImplementedError

    def _share(
        self, cpus: float, gpus: float, *, by_type: Mapping[str, float] | None = None
    ) -> float:
        raise NotImplementedError

    types: GpuTypes | None
    held_t: dict[str, dict[str, float]]

    def _quiet(self) -> bool:
        """True when planning now could neither start nor preempt anything, whatever the
        order (which the owed accounts move between ticks). Sound, not complete: each test
        below is implied by what ``policy.planner`` needs to start or preempt a job.

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
        for i in self.narrow:  # an elastic job may grow (or, with a queue, lend back)
            j = self.state[i].job
            if self.queued or place_gang(replace(j, num_workers=1), free) is not None:
                return False
        if self.queued and any(
            self.state[i].job.num_workers > (self.state[i].line.min_workers or 1 << 30)
            for i in self.running
        ):
            return False  # lent workers may be taken back
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
            shares = {
                t: self._share(*self.held.get(t, (0.0, 0.0)), by_type=self.held_t.get(t))
                for t in demanding
            }
            # A queued job's share is at least its CPUs' and its GPUs' on the lowest-weighted
            # type: a lower bound of what the plan counts, wherever it lands (mixed cluster).
            low = 1.0 if self.types is None else min(self.types.scale.values())
            above = {st.job.team for st in running if st.job.preemptible} & {
                t for t in demanding if shares[t] > fair[t]
            }
            for team, c in self.shapes.items():
                smallest = min(
                    (
                        dominant_share(
                            s.num_workers * s.cpus_per_worker,
                            s.num_workers * s.gpus_per_worker * low,
                            total_cpus=self.total_cpus,
                            total_gpus=self.total_gpus,
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
            seen: set[tuple[Shape, int]] = set()
            for i in self.queued:  # class, then waiting time: each group's oldest first
                st = self.state[i]
                j = st.job
                group = (
                    Shape(j.num_workers, j.cpus_per_worker, j.gpus_per_worker),
                    priority_rank(st.priority),
                )
                if not st.fits_ever or group in seen:
                    continue
                seen.add(group)
                cpus, gpus = self.total_cpus, self.total_gpus
                for r in running:
                    a = self._active(r)
                    gone = a.expected_end_at is not None and secs(a.expected_end_at) <= self.now
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
