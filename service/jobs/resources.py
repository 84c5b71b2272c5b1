"""Submit-time wording over ``policy.capacity.fits_ever``: can a job's gang EVER fit?

A job that cannot fit even on an empty cluster would wait forever, so the API rejects it at
submit time with what the cluster has. The decision is the scheduler's own
(``service.policy.capacity``: same placement, same epsilon); this module only words
the 422.
"""

from __future__ import annotations

from collections.abc import Sequence

from service.policy.capacity import NodeFree, max_workers_placeable, place_gang
from shunter.jobspec.errors import FieldError
from shunter.jobspec.models import JobSpec

__all__ = ["resource_errors"]

_NODES_SHOWN = 8


def resource_errors(spec: JobSpec, *, nodes: Sequence[tuple[float, float]]) -> list[FieldError]:
    """One error on ``resources`` if the gang can never be placed on ``nodes``: the alive
    nodes' (total_cpus, total_gpus)."""
    r = spec.resources
    empty = [NodeFree(node_id=str(i), cpus=c, gpus=g) for i, (c, g) in enumerate(nodes)]
    if place_gang(r, empty) is not None:
        return []
    fits = max_workers_placeable(r, empty)
    shown = ", ".join(f"{c:g} CPU/{g:g} GPU" for c, g in nodes[:_NODES_SHOWN])
    more = f" and {len(nodes) - _NODES_SHOWN} more" if len(nodes) > _NODES_SHOWN else ""
    cluster = f"{len(nodes)} node(s): {shown}{more}" if nodes else "no alive nodes"
    return [
        FieldError(
            "resources",
            f"{r.num_workers} workers x ({r.cpus_per_worker:g} CPU, {r.gpus_per_worker:g} GPU)"
            f" can never fit: at most {fits} such worker(s) fit, each on one node; the cluster"
            f" has {cluster}",
        )
    ]
