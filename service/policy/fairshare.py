"""Weighted fair share over GPUs and CPUs (dominant resource share), with a decayed account
of what each team is owed.

A team's *share* is its dominant share of the cluster: max(GPUs held / cluster GPUs,
CPUs held / cluster CPUs), 0..1. Its *owed* account (``advance_owed``) integrates, over time,
its weighted max-min fair share of that moment's demand minus the share it held, decayed with
half-life ``half_life_s`` (the live default: 7 days): a team kept below its share while it had
work waiting is owed the difference, a team that held more than its share while others waited
owes it, and nobody is charged for capacity that no one else wanted (max-min gives a team its
whole demand when the others' is met). The ordering key within a priority class is
``(share x HORIZON_S - owed) / weight``: lower goes first, so the team owed the most per unit of
weight goes first, and each placement charges its team HORIZON_S seconds of its share. This is
stride scheduling on a deficit: over time every contending team's allocation returns to its
weighted share even when its jobs are larger than that share (it runs a large job, then waits
until the others have caught up), which a key over decayed usage alone only partly pays back.
Decayed usage (``decayed_average``, Slurm's) breaks ties: between two teams owed the same, the
one that ran less lately goes first. Pure functions.

On a mixed cluster (``GpuTypes``: GPUs of two or more accelerator types) each type is a
resource of its own: a team's share of a type is the GPUs of it it holds / the type's GPUs,
scaled by the type's weight / the largest weight (``SHUNTER_ACCELERATOR_TYPES``: an H100 of
weight 2 counts twice an L4 of weight 1), and its dominant share is the largest of those and
its CPU share. ``dominant_share`` is the one function that computes it: the plan's order and
preemption, the owed account, the usage history, the ETA arrivals and the simulator all call
it. A cluster of one type (or untyped) has no ``GpuTypes`` and the share is as it always was.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "HORIZON_S",
    "GpuTypes",
    "RunInterval",
    "accrue_owed",
    "advance_owed",
    "contended_fair",
    "decay_step",
    "decayed_average",
    "dominant_share",
    "entitlements",
    "fair_dominant",
    "fair_key",
    "job_share",
    "max_min_fair",
    "resource_shares",
]


# A placement charges its team this many seconds of the share it adds (``fair_key``): about
# the time a job holds what it takes before the order looks at that team again. Measured
# (docs/scheduling.md): 1300-5200 s all meet the share bar; 2600 s keeps utilisation highest.
HORIZON_S = 2600.0


@dataclass(frozen=True, kw_only=True)
class RunInterval:
    """Resources held from ``start_s`` to ``end_s`` (None = still held); epoch seconds."""

    start_s: float
    end_s: float | None
    cpus: float
    gpus: float
    accelerator: str | None = None  # the type it ran on (None: not known)


class _Node(Protocol):
    @property
    def gpus(self) -> float: ...
    @property
    def accelerator(self) -> str: ...


@dataclass(frozen=True)
class GpuTypes:
    """A mixed cluster's GPUs per accelerator type ("" = untyped nodes; two or more types)
    and each type's scale in a share: its weight / the largest weight among them."""

    capacity: Mapping[str, float]
    scale: Mapping[str, float]
    total: float
    # accepted types -> (type, its fraction of their GPUs), made when first asked
    _spread: dict[tuple[str, ...], tuple[tuple[str, float], ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @staticmethod
    def of(nodes: Iterable[_Node], weights: Mapping[str, float] | None = None) -> GpuTypes | None:
        """None unless the nodes' GPUs are of two or more types (then per-type shares are
        the pooled share: the order is as it always was)."""
        cap: dict[str, float] = {}
        for n in nodes:
            if n.gpus > 0:
                cap[n.accelerator] = cap.get(n.accelerator, 0.0) + n.gpus
        if len(cap) < 2:
            return None
        w = {t: (weights or {}).get(t, 1.0) for t in sorted(cap)}
        top = max(w.values())
        return GpuTypes(
            capacity={t: cap[t] for t in w},
            scale={t: x / top for t, x in w.items()},
            total=math.fsum(cap.values()),
        )

    def charge(
        self,
        into: MutableMapping[str, float],
        gpus: float,
        accelerator: str | None,
        accepts: Sequence[str] = (),
        sign: float = 1.0,
    ) -> None:
        """Add ``sign`` x a job's GPUs to ``into`` per type: all on ``accelerator`` (the type
        it runs on) when the cluster has it; else (queued, or its type unknown) spread over
        the types it ``accepts`` (() = every type) in proportion to their GPUs, which adds the
        same to each one's share (a job that may land on any type is charged as pooled)."""
        if gpus <= 0:
            return
        if accelerator is not None and accelerator in self.capacity:
            into[accelerator] = into.get(accelerator, 0.0) + sign * gpus
            return
        key = tuple(accepts)
        spread = self._spread.get(key)
        if spread is None:
            on = [t for t in key if t in self.capacity] or list(self.capacity)
            cap = math.fsum(self.capacity[t] for t in on)
            spread = self._spread[key] = tuple((t, self.capacity[t] / cap) for t in on)
        for t, part in spread:
            into[t] = into.get(t, 0.0) + sign * gpus * part


def decayed_average(
    intervals: Iterable[RunInterval],
    *,
    now_s: float,
    half_life_s: float,
    by_type: MutableMapping[str, float] | None = None,
) -> tuple[float, float]:
    """(CPUs, GPUs) held on exponentially weighted average up to ``now_s``; with
    ``by_type``, the GPUs' average per type (of the intervals whose type is known) is added
    to it.

    Weight e^(-lambda * age), lambda = ln 2 / half_life, normalised so a constant holding
    of x averages x over an infinite past: lambda * integral of x * e^(-lambda * (now - t)) dt.
    """
    lam = math.log(2) / half_life_s
    cpus = gpus = 0.0
    for iv in intervals:
        end = now_s if iv.end_s is None else min(iv.end_s, now_s)
        if end <= iv.start_s:
            continue
        weight = math.exp(-lam * (now_s - end)) - math.exp(-lam * (now_s - iv.start_s))
        cpus += iv.cpus * weight
        gpus += iv.gpus * weight
        if by_type is not None and iv.accelerator is not None:
            by_type[iv.accelerator] = by_type.get(iv.accelerator, 0.0) + iv.gpus * weight
    return cpus, gpus


def dominant_share(
    cpus: float,
    gpus: float,
    *,
    total_cpus: float,
    total_gpus: float,
    by_type: Mapping[str, float] | None = None,
    types: GpuTypes | None = None,
) -> float:
    """max over resources of held / cluster total; resources the cluster lacks are ignored.

    With ``types`` (a mixed cluster) each GPU type is a resource: ``by_type`` (GPUs held per
    type) / the type's GPUs x its scale; the GPUs of ``gpus`` that ``by_type`` does not place
    on a type the cluster has count on every type alike (``gpus`` - those / all GPUs)."""
    shares = [0.0]
    if types is not None:
        shares.extend(_type_shares(gpus, by_type or {}, types).values())
    elif total_gpus > 0:
        shares.append(gpus / total_gpus)
    if total_cpus > 0:
        shares.append(cpus / total_cpus)
    return max(shares)


def _type_shares(
    gpus: float, held: Mapping[str, float], types: GpuTypes
) -> dict[str | None, float]:
    """Each type's share of ``held`` (GPUs per type) x its scale, the GPUs of ``gpus`` placed
    on no type the cluster has counting on every type alike (``dominant_share``)."""
    placed = 0.0
    for t in types.capacity:
        placed += held.get(t, 0.0)
    rest = max(gpus - placed, 0.0) / types.total
    return {
        t: types.scale[t] * (held.get(t, 0.0) / cap + rest) for t, cap in types.capacity.items()
    }


def resource_shares(
    cpus: float,
    gpus: float,
    *,
    total_cpus: float,
    by_type: Mapping[str, float] | None,
    types: GpuTypes,
) -> dict[str | None, float]:
    """A team's share of each resource of a mixed cluster, as ``dominant_share`` counts them
    (the largest is its dominant share): each GPU type's, scaled (key: the type), and the
    CPUs' (key None; none when the cluster has no CPUs)."""
    out = _type_shares(gpus, by_type or {}, types)
    if total_cpus > 0:
        out[None] = cpus / total_cpus
    return out


def fair_dominant(
    demand: Mapping[str, Mapping[str | None, float]],
    weights: Mapping[str, float],
    types: GpuTypes,
) -> dict[str, float]:
    """Each team's weighted max-min fair dominant share of a mixed cluster given its demand
    of each resource (``resource_shares``): every resource is shared out by itself (a GPU
    type's capacity is its scale, the CPUs' 1), and a team's fair share is the largest of
    what it gets of each. Two teams that each want only a different type both get all of it,
    where one capacity of 1.0 for all resources would give each a half."""
    fair = dict.fromkeys(demand, 0.0)
    resources: list[str | None] = [*types.capacity, None]
    for r in resources:
        want = {t: d[r] for t, d in demand.items() if d.get(r, 0.0) > 0}
        if not want:
            continue
        cap = 1.0 if r is None else types.scale[r]
        for t, got in max_min_fair(want, weights, cap).items():
            fair[t] = max(fair[t], got)
    return fair


def job_share(
    cpus: float,
    gpus: float,
    *,
    total_cpus: float,
    total_gpus: float,
    types: GpuTypes | None = None,
    accelerator: str | None = None,
    accepts: Sequence[str] = (),
) -> float:
    """``dominant_share`` of one job's resources: its GPUs on ``accelerator`` (running), or
    spread over the types it ``accepts`` (queued: ``GpuTypes.charge``)."""
    by: dict[str, float] = {}
    if types is not None:
        types.charge(by, gpus, accelerator, accepts)
    return dominant_share(
        cpus, gpus, total_cpus=total_cpus, total_gpus=total_gpus, by_type=by, types=types
    )


def fair_key(*, share: float, owed_s: float, history: float, weight: float) -> tuple[float, float]:
    """Lower is served first: ``(share x HORIZON_S - owed_s) / weight``, then decayed usage.
    ``weight`` > 0 (the database and the schema enforce it)."""
    return ((share * HORIZON_S - owed_s) / weight, history / weight)


def advance_owed(
    owed: Mapping[str, float],
    *,
    held: Mapping[str, float],
    demand: Mapping[str, float],
    waiting: Collection[str],
    weights: Mapping[str, float],
    dt_s: float,
    half_life_s: float,
    demand_by: Mapping[str, Mapping[str | None, float]] | None = None,
    types: GpuTypes | None = None,
) -> dict[str, float]:
    """Each team's owed account (share-seconds) advanced by ``dt_s`` during which it held
    ``held`` and demanded ``demand`` (dominant shares, 0..1; demand = running + queued work
    that fits the cluster): the old balance decays and, while the teams contend, the weighted
    max-min fair share of the demand minus what was held accrues (decayed over the step,
    exact for constant rates; ``contended_fair``, ``accrue_owed``). On a mixed cluster
    (``types``, with each team's demand of each resource, ``demand_by``) the fair share is
    the largest over resources of each one shared out by itself (``fair_dominant``)."""
    fair = contended_fair(demand, waiting, weights, demand_by=demand_by, types=types)
    return accrue_owed(owed, held=held, fair=fair, dt_s=dt_s, half_life_s=half_life_s)


def contended_fair(
    demand: Mapping[str, float],
    waiting: Collection[str],
    weights: Mapping[str, float],
    *,
    demand_by: Mapping[str, Mapping[str | None, float]] | None = None,
    types: GpuTypes | None = None,
) -> dict[str, float] | None:
    """The demanding teams' fair dominant shares while they contend, else None. The teams
    contend when two or more have demand and each of them has work ``waiting``: each wants
    more than it holds. At other times some team's demand is met in full and fairness holds
    nobody back. Untyped (or no ``demand_by``): the weighted max-min fair share of one
    capacity of 1.0; on a mixed cluster, ``fair_dominant`` of each team's ``demand_by``."""
    demanding = {t for t, d in demand.items() if d > 0}
    if not (len(demanding) >= 2 and demanding <= set(waiting)):
        return None
    if types is None or demand_by is None:
        return max_min_fair({t: demand[t] for t in demanding}, weights, 1.0)
    return fair_dominant({t: demand_by.get(t, {}) for t in sorted(demanding)}, weights, types)


def accrue_owed(
    owed: Mapping[str, float],
    *,
    held: Mapping[str, float],
    fair: Mapping[str, float] | None,
    dt_s: float,
    half_life_s: float,
) -> dict[str, float]:
    """``owed`` decayed over ``dt_s``, plus (while the teams contend: ``fair`` not None)
    ``fair`` - ``held`` integrated with the same decay (~ x ``dt_s``)."""
    lam = math.log(2) / half_life_s
    keep = math.exp(-lam * dt_s)
    gain = -math.expm1(-lam * dt_s) / lam  # integral of the decay weight over the step (~ dt_s)
    got = fair or {}
    teams = set(owed) | set(held) | set(got)
    return {
        t: owed.get(t, 0.0) * keep
        + ((got.get(t, 0.0) - held.get(t, 0.0)) * gain if fair is not None else 0.0)
        for t in sorted(teams)
    }


def entitlements(weights: Mapping[str, float]) -> dict[str, float]:
    """Each demanding team's fair dominant share: weight / sum of the demanding weights."""
    total = sum(weights.values())
    return {t: (w / total if total > 0 else 0.0) for t, w in weights.items()}


def max_min_fair(
    demands: Mapping[str, float], weights: Mapping[str, float], capacity: float
) -> dict[str, float]:
    """Weighted max-min fair allocation of ``capacity`` (water-filling): no team gets more
    than it demands, and what a satisfied team leaves is shared by weight among the rest."""
    alloc = dict.fromkeys(demands, 0.0)
    left = {t for t, d in demands.items() if d > 0}
    cap = capacity
    while left and cap > 1e-9:
        wsum = sum(weights.get(t, 1.0) for t in left)
        share = {t: cap * weights.get(t, 1.0) / wsum for t in left}
        done = {t for t in left if demands[t] - alloc[t] <= share[t] + 1e-12}
        if not done:
            for t in left:
                alloc[t] += share[t]
            break
        for t in done:
            cap -= demands[t] - alloc[t]
            alloc[t] = demands[t]
        left -= done
    return alloc


def decay_step(average: float, held: float, *, dt_s: float, half_life_s: float) -> float:
    """``decayed_average`` advanced by ``dt_s`` during which ``held`` was held (incremental
    form of the same average, for the simulator's virtual clock)."""
    keep = math.exp(-math.log(2) / half_life_s * dt_s)
    return average * keep + held * (1.0 - keep)
