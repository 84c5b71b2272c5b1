"""Submit-time wording over ``policy.capacity.fits_ever``: can a job's gang EVER fit?

A job that cannot fit even on an empty cluster would wait forever, so the API rejects it at
submit time with what the cluster has. The decision is the scheduler's own
(``service.policy.capacity``: same placement, same epsilon); this module only words
the 422.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from service.policy.capacity import NodeFree, max_workers_placeable, place_gang
from shunter.jobspec.errors import FieldError
from shunter.jobspec.spec import JobSpec, ResourcesSpec

__all__ = ["resource_errors"]

_NODES_SHOWN = 8


@dataclass(frozen=True, kw_only=True)
class _MinGang:
    """The gang at its narrowest width: an elastic job starts on ``min`` workers."""

    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    accelerators: tuple[str, ...]


def _min_gang(r: ResourcesSpec) -> _MinGang:
    return _MinGang(
        num_workers=r.min_workers,
        cpus_per_worker=r.cpus_per_worker,
        gpus_per_worker=r.gpus_per_worker,
        accelerators=tuple(getattr(r, "accelerators", ())),
    )


def resource_errors(
    spec: JobSpec, *, nodes: Sequence[tuple[float, float] | tuple[float, float, str]]
) -> list[FieldError]:
    """One error on ``resources`` if the gang can never be placed on ``nodes``: the alive
    nodes' (total_cpus, total_gpus[, accelerator type])."""
    r = spec.resources
    empty = [
        NodeFree(node_id=str(i), cpus=n[0], gpus=n[1], accelerator=n[2] if len(n) > 2 else "")
        for i, n in enumerate(nodes)
    ]
    gang = _min_gang(r)  # an elastic job starts on min
    if place_gang(gang, empty) is not None:
        return []
    fits = max_workers_placeable(gang, empty)
    shown = ", ".join(
        f"{n[0]:g} CPU/{n[1]:g} GPU" + (f" {n[2]}" if len(n) > 2 and n[2] else "")
        for n in nodes[:_NODES_SHOWN]
    )
    more = f" and {len(nodes) - _NODES_SHOWN} more" if len(nodes) > _NODES_SHOWN else ""
    cluster = f"{len(nodes)} node(s): {shown}{more}" if nodes else "no alive nodes"
    return [
        FieldError(
            "resources",
            f"{gang.num_workers} workers x ({r.cpus_per_worker:g} CPU, {r.gpus_per_worker:g} GPU"
            + (f" of type {' or '.join(r.accelerators)}" if r.accelerators else "")
            + ")"
            f" can never fit: at most {fits} such worker(s) fit, each on one node; the cluster"
            f" has {cluster}",
        )
    ]
