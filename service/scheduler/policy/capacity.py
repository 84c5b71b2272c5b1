"""THE free capacity: what is free now, where a gang goes, and whether it could ever fit.

Pure (stdlib only): the scheduler loop, the ``/v1/queue`` view (through the positions and
reasons the loop stores) and admission's submit-time check all use these functions, so they
cannot disagree about whether a job fits.

- ``free_now(nodes, active)``: per alive node, the smaller of the launcher's free figure and
  the node's totals minus our own packing of the active jobs. Ray counts placement-group
  reservations as used, but a just-claimed job has no placement group yet (its driver is
  still starting): taking the minimum never double-books it.
- ``place_gang(gang, free)``: every worker of the gang on some node (first fit, fullest node
  first), or ``None``: all of a job's workers start at once or none do.
- ``fits_ever(gang, nodes)``: the gang fits the alive nodes' totals (the cluster empty).
  For workers of one shape, first fit places the most workers possible, so this equals
  ``max_workers_placeable(...) >= num_workers``.

Ray reports fractional resources as floats (0.1 + 0.2 noise): every comparison allows the one
``EPS``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "EPS",
    "Gang",
    "NodeCapacity",
    "NodeFree",
    "fits_ever",
    "free_now",
    "max_workers_placeable",
    "never_fits_reason",
    "place_gang",
    "take",
    "totals",
]

EPS = 1e-9


class Gang(Protocol):
    """A job's resource request: ``num_workers`` x (``cpus_per_worker``, ``gpus_per_worker``)."""

    @property
    def num_workers(self) -> int: ...
    @property
    def cpus_per_worker(self) -> float: ...
    @property
    def gpus_per_worker(self) -> float: ...


class NodeCapacity(Protocol):
    """One node as the launcher reports it (``service.launch.NodeResources`` is one)."""

    @property
    def node_id(self) -> str: ...
    @property
    def alive(self) -> bool: ...
    @property
    def total_cpus(self) -> float: ...
    @property
    def total_gpus(self) -> float: ...
    @property
    def free_cpus(self) -> float: ...
    @property
    def free_gpus(self) -> float: ...


@dataclass(frozen=True, kw_only=True)
class NodeFree:
    node_id: str
    cpus: float
    gpus: float


def _has(have: float, need: float) -> bool:
    return have + EPS >= need


def place_gang(gang: Gang, free: Sequence[NodeFree]) -> list[str] | None:
    """A node id per worker (first fit, fullest node first), or None if any does not fit."""
    left = {n.node_id: [n.cpus, n.gpus] for n in free}
    order = sorted(left, key=lambda nid: (left[nid][1], left[nid][0]))
    out: list[str] = []
    for _ in range(gang.num_workers):
        for nid in order:
            cpus, gpus = left[nid]
            if _has(cpus, gang.cpus_per_worker) and _has(gpus, gang.gpus_per_worker):
                left[nid] = [cpus - gang.cpus_per_worker, gpus - gang.gpus_per_worker]
                out.append(nid)
                break
        else:
            return None
    return out


def take(free: Sequence[NodeFree], placement: Sequence[str], gang: Gang) -> list[NodeFree]:
    """``free`` minus ``gang`` placed as ``placement``."""
    used = {nid: placement.count(nid) for nid in set(placement)}
    return [
        NodeFree(
            node_id=n.node_id,
            cpus=n.cpus - used.get(n.node_id, 0) * gang.cpus_per_worker,
            gpus=n.gpus - used.get(n.node_id, 0) * gang.gpus_per_worker,
        )
        for n in free
    ]


def totals(nodes: Sequence[NodeCapacity]) -> list[NodeFree]:
    """The alive nodes as if empty."""
    return [
        NodeFree(node_id=n.node_id, cpus=n.total_cpus, gpus=n.total_gpus) for n in nodes if n.alive
    ]


def free_now(nodes: Sequence[NodeCapacity], active: Sequence[Gang]) -> list[NodeFree]:
    """Per alive node: min(launcher's free, totals minus our packing of ``active``).

    ``active`` in a stable order (the loop sorts by job id). A job that no longer fits our
    packing (the cluster shrank) is skipped: the launcher's own figure covers it.
    """
    packed = totals(nodes)
    for gang in active:
        placement = place_gang(gang, packed)
        if placement is not None:
            packed = take(packed, placement, gang)
    ours = {n.node_id: n for n in packed}
    return [
        NodeFree(
            node_id=n.node_id,
            cpus=min(n.free_cpus, ours[n.node_id].cpus),
            gpus=min(n.free_gpus, ours[n.node_id].gpus),
        )
        for n in nodes
        if n.alive
    ]


def max_workers_placeable(gang: Gang, nodes: Sequence[NodeFree]) -> int:
    """How many workers of the gang's shape fit on ``nodes`` at most."""
    total = 0
    for n in nodes:
        fit = math.floor(n.cpus / gang.cpus_per_worker + EPS) if gang.cpus_per_worker > 0 else None
        if gang.gpus_per_worker > 0:
            by_gpu = math.floor(n.gpus / gang.gpus_per_worker + EPS)
            fit = by_gpu if fit is None else min(fit, by_gpu)
        if fit is None:  # a worker that needs nothing fits any number of times
            return gang.num_workers
        total += max(fit, 0)
    return total


def fits_ever(gang: Gang, nodes: Sequence[NodeCapacity]) -> bool:
    """Could the gang start on these nodes if nothing else ran?"""
    return place_gang(gang, totals(nodes)) is not None


def never_fits_reason(gang: Gang, nodes: Sequence[NodeCapacity]) -> str | None:
    """Why the gang could not start even on the empty cluster, or None."""
    if fits_ever(gang, nodes):
        return None
    alive = totals(nodes)
    cpus = sum(n.cpus for n in alive)
    gpus = sum(n.gpus for n in alive)
    return (
        f"cannot fit the cluster as it is now: needs {gang.num_workers} x "
        f"({gang.cpus_per_worker:g} CPU, {gang.gpus_per_worker:g} GPU) at once; the cluster "
        f"has {len(alive)} node(s) with {cpus:g} CPUs and {gpus:g} GPUs in all"
    )
