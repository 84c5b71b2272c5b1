"""What each team holds and demands in the simulator, kept as jobs come and go (the clock
reads them at every step), and their fair shares. A mixin of ``service.sim.engine._Sim``: it
reads the engine's state, declared below.

On a mixed cluster (``fairshare.GpuTypes``, the nodes' types and ``SimConfig.type_weights``)
the GPUs are kept per type as well: a running job's on the type of the nodes it runs on, a
queued one's spread over the types it accepts, and the usage history per type; every share
is ``fairshare.dominant_share`` of them, as the live loop's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from service.policy.capacity import NodeFree
from service.policy.fairshare import (
    GpuTypes,
    accrue_owed,
    contended_fair,
    decay_step,
    dominant_share,
    resource_shares,
)
from service.sim.model import JobState, Shape, SimTeam

__all__ = ["Tallies"]

_Typed = dict[str, dict[str, float]]  # team -> type -> GPUs


class Tallies:
    node_type: dict[str, str]
    total_cpus: float
    total_gpus: float
    held: dict[str, list[float]]
    held_jobs: Counter[str]
    demand: dict[str, list[float]]
    waiting: dict[str, int]
    shapes: dict[str, Counter[Shape]]
    teams: dict[str, SimTeam]
    owed: dict[str, float]

    def _typed_init(self, totals: Sequence[NodeFree], weights: Mapping[str, float] | None) -> None:
        self.type_weights = weights  # what the policy's snapshots say too
        self.types: GpuTypes | None = GpuTypes.of(totals, weights)
        self.held_t: _Typed = {}  # running jobs' GPUs per type
        self.queued_t: _Typed = {}  # queued jobs' (that fit the cluster), spread
        self.history_t: _Typed = {}  # decayed average of ``held_t``

    def _count(self, st: JobState, *, held: int = 0, demand: int = 0, waiting: int = 0) -> None:
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
            shapes[Shape(j.num_workers, j.cpus_per_worker, j.gpus_per_worker)] += waiting
            self.shapes[team] = +shapes
            if d == [0.0, 0.0]:
                del self.demand[team]
            if self.types is not None and waiting:
                into = self.queued_t.setdefault(team, {})
                self.types.charge(into, gpus, None, j.accelerators, float(waiting))

    def _on_nodes(self, st: JobState, sign: float) -> None:
        """``st`` takes (1) or gives back (-1) its placement's GPUs, on their type."""
        if self.types is not None and st.placement:
            j = st.job
            into = self.held_t.setdefault(j.team, {})
            on = self.node_type.get(st.placement[0], "")
            self.types.charge(into, j.num_workers * j.gpus_per_worker, on, j.accelerators, sign)

    def _decay_typed(self, dt: float, half_life_s: float) -> None:
        if self.types is None:
            return
        for team in set(self.held_t) | set(self.history_t):
            now, past = self.held_t.get(team, {}), self.history_t.setdefault(team, {})
            for t in set(now) | set(past):
                past[t] = decay_step(
                    past.get(t, 0.0), now.get(t, 0.0), dt_s=dt, half_life_s=half_life_s
                )

    def _demand_t(self, team: str) -> dict[str, float] | None:
        if self.types is None:
            return None
        held, queued = self.held_t.get(team, {}), self.queued_t.get(team, {})
        return {t: held.get(t, 0.0) + queued.get(t, 0.0) for t in set(held) | set(queued)}

    def _share(
        self, cpus: float, gpus: float, *, by_type: Mapping[str, float] | None = None
    ) -> float:
        return dominant_share(
            cpus,
            gpus,
            total_cpus=self.total_cpus,
            total_gpus=self.total_gpus,
            by_type=by_type,
            types=self.types,
        )

    def _owed_step(
        self,
        held: Mapping[str, Sequence[float]],
        demand: Mapping[str, Sequence[float]],
        waiting: frozenset[str],
        dt: float,
        half_life_s: float,
    ) -> dict[str, tuple[float, float]] | None:
        """Advance the owed accounts over ``dt`` (``fairshare.advance_owed``, as the live
        loop's ``scheduler/owed.py``: on a mixed cluster each type is shared out by itself).
        On a mixed cluster, the step's (held, fair) dominant share of each team with demand
        while the teams contend ({} when they do not), for the report; None untyped."""
        shares = {t: self._share(*h, by_type=self.held_t.get(t)) for t, h in held.items()}
        demand_by = None
        if self.types is not None:
            demand_by = {
                t: resource_shares(
                    d[0],
                    d[1],
                    total_cpus=self.total_cpus,
                    by_type=self._demand_t(t),
                    types=self.types,
                )
                for t, d in demand.items()
            }
        fair = contended_fair(
            {t: self._share(*d, by_type=self._demand_t(t)) for t, d in demand.items()},
            waiting,
            {t: s.weight for t, s in self.teams.items()},
            demand_by=demand_by,
            types=self.types,
        )
        self.owed = accrue_owed(self.owed, held=shares, fair=fair, dt_s=dt, half_life_s=half_life_s)
        if self.types is None:
            return None
        return {t: (shares.get(t, 0.0), f) for t, f in (fair or {}).items()}
