"""Can a job's gang of workers EVER fit on a cluster? (Not: does it fit right now.)

A worker needs ``cpus_per_worker`` CPUs and ``gpus_per_worker`` GPUs on one node; the
gang needs all ``num_workers`` placed at once. A job that cannot fit even on an empty
cluster would wait forever, so the API rejects it at submit time with what the cluster has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from service.spec.errors import FieldError
from service.spec.models import JobSpec

__all__ = ["max_workers_placeable", "resource_errors"]

# Ray reports fractional resources as floats (0.1 + 0.2 style noise); round before flooring.
_EPS = 1e-9
_NODES_SHOWN = 8


def max_workers_placeable(
    nodes: Sequence[tuple[float, float]], *, cpus_per_worker: float, gpus_per_worker: float
) -> int:
    """How many workers of this shape fit on these (total_cpus, total_gpus) nodes at most."""
    total = 0
    for cpus, gpus in nodes:
        fit = math.floor(cpus / cpus_per_worker + _EPS)
        if gpus_per_worker > 0:
            fit = min(fit, math.floor(gpus / gpus_per_worker + _EPS))
        total += max(fit, 0)
    return total


def resource_errors(spec: JobSpec, *, nodes: list[tuple[float, float]]) -> list[FieldError]:
    """One error on ``resources`` if the gang can never be placed on ``nodes`` (alive ones)."""
    r = spec.resources
    fits = max_workers_placeable(
        nodes, cpus_per_worker=r.cpus_per_worker, gpus_per_worker=r.gpus_per_worker
    )
    if fits >= r.num_workers:
        return []
    shown = ", ".join(f"{_num(c)} CPU/{_num(g)} GPU" for c, g in nodes[:_NODES_SHOWN])
    more = f" and {len(nodes) - _NODES_SHOWN} more" if len(nodes) > _NODES_SHOWN else ""
    cluster = f"{len(nodes)} node(s): {shown}{more}" if nodes else "no alive nodes"
    return [
        FieldError(
            "resources",
            f"{r.num_workers} workers x ({_num(r.cpus_per_worker)} CPU, {r.gpus_per_worker} GPU)"
            f" can never fit: at most {fits} such worker(s) fit, each on one node; the cluster"
            f" has {cluster}",
        )
    ]


def _num(value: float) -> str:
    return f"{value:g}"
