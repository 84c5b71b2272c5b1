"""Submit-time accelerator types (issue 30): names the server knows, and the memory plan
against each candidate type's card.

``accelerator_check(spec, nodes=..., admin=...)`` returns the spec with
``resources.accelerator`` narrowed to the types whose card holds the job's plan (what the
scheduler then places it on; ``policy.accelerators.eligible``, as the simulator does) and
the errors: an unknown type name (422 naming the field and the known types, when the server
knows some), or a job no acceptable card holds (422 naming the largest card and the plan's
bytes per GPU). CPU jobs, and plans of unknown size (a hub model the server cannot count),
are not judged on memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from service.jobs.plan_facts import memory_facts, param_counts
from service.policy.accelerators import AcceleratorType, catalog_of, eligible
from shunter.jobspec import FieldError, JobSpec
from shunter.jobspec.plan import plan_for

__all__ = ["accelerator_check", "plan_bytes_per_gpu"]

_FIELD = "resources.accelerator"


def plan_bytes_per_gpu(spec: JobSpec) -> int | None:
    """The memory plan's bytes per GPU (``shunter plan``'s total), None when unknown."""
    params, trainable = param_counts(spec)
    if params is None:
        return None
    got = plan_for(spec, param_count=params, trainable_count=trainable, **memory_facts(spec))
    return got.memory.total_bytes


def accelerator_check(
    spec: JobSpec,
    *,
    nodes: Sequence[tuple[str, float]],
    admin: Mapping[str, AcceleratorType],
) -> tuple[JobSpec, list[FieldError]]:
    """``nodes``: the alive nodes' (type, total GPUs); ``admin``: SHUNTER_ACCELERATOR_TYPES."""
    catalog = catalog_of(((t, g, None) for t, g in nodes), admin)
    r = spec.resources
    asked = r.accelerators
    if asked and catalog:
        unknown = [t for t in asked if t not in catalog]
        if unknown:
            return spec, [
                FieldError(
                    _FIELD,
                    f"unknown accelerator type {', '.join(map(repr, unknown))}; this server "
                    f"knows {', '.join(sorted(catalog))}",
                )
            ]
    typed = {t: c for t, c in catalog.items() if c.gpus > 0 or t in asked}
    if r.gpus_per_worker == 0 or not typed:
        return spec, []
    need = plan_bytes_per_gpu(spec)
    types, why = eligible(asked, need, typed)
    if why is not None:
        return spec, [FieldError(_FIELD if asked else "resources", f"no GPU type holds it: {why}")]
    if types == asked:
        return spec, []
    resources = r.model_copy(update={"accelerator": list(types) if types else None})
    return spec.model_copy(update={"resources": resources}), []
