"""Accelerator types: their names, what the cluster says of each, and which types a job may
run on given its memory plan. Pure (stdlib only).

A node carries one type (``capacity.NodeFree.accelerator``; "" = untyped). Names are Ray's
``accelerator_type:<T>`` resource names lower-cased (``H100`` -> ``h100``, ``A100-40G`` ->
``a100-40g``), or what the admin names a node group (``SHUNTER_NODE_GROUP_ACCELERATORS``).
A type's card memory and usage weight come from the nodes (``gpu_memory_gb``) and the admin
(``SHUNTER_ACCELERATOR_TYPES``). Submit (``service.jobs.accelerator_check``) and the simulator
call ``eligible`` the same way: a job runs only on the types whose card holds its plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KNOWN_MEMORY_GB",
    "RAY_RESOURCE_PREFIX",
    "AcceleratorType",
    "admin_catalog",
    "catalog_of",
    "eligible",
    "gpu_weights",
    "node_type",
    "normalize",
    "type_of_resources",
]

RAY_RESOURCE_PREFIX = "accelerator_type:"
_GB = 1024**3


def normalize(name: str) -> str:
    """``"H100"``, ``" accelerator_type:H100"`` -> ``"h100"``."""
    name = name.strip()
    if name.startswith(RAY_RESOURCE_PREFIX):
        name = name[len(RAY_RESOURCE_PREFIX) :]
    return name.lower()


def type_of_resources(resources: Mapping[str, float]) -> str:
    """A node's type from its Ray resources (``accelerator_type:<T>``), "" if none. With
    several (a mixed node, which Ray does not make itself), the first in name order."""
    names = sorted(k for k in resources if k.startswith(RAY_RESOURCE_PREFIX))
    return normalize(names[0]) if names else ""


@dataclass(frozen=True, kw_only=True)
class AcceleratorType:
    name: str
    memory_bytes: int | None = None  # one card's memory; None = unknown
    weight: float = 1.0  # GPU-hours on it count this many times (budgets, usage)
    gpus: float = 0.0  # in the cluster now (alive nodes)

    @property
    def memory_gb(self) -> float | None:
        return None if self.memory_bytes is None else self.memory_bytes / _GB


def catalog_of(
    nodes: Iterable[tuple[str, float, float | None]],
    admin: Mapping[str, AcceleratorType] | None = None,
) -> dict[str, AcceleratorType]:
    """The types known: the admin's (memory, weight) and the nodes' (type, GPUs, card GB);
    a type's memory is the admin's, else the node's, else ``KNOWN_MEMORY_GB``'s."""
    out = {
        k: AcceleratorType(name=k, memory_bytes=v.memory_bytes, weight=v.weight)
        for k, v in (admin or {}).items()
    }
    for t, gpus, gb in nodes:
        if not t:
            continue
        got = out.get(t) or AcceleratorType(name=t)
        mem = got.memory_bytes
        if mem is None and gb:
            mem = int(gb * _GB)
        if mem is None and t in KNOWN_MEMORY_GB:
            mem = int(KNOWN_MEMORY_GB[t] * _GB)
        out[t] = AcceleratorType(name=t, memory_bytes=mem, weight=got.weight, gpus=got.gpus + gpus)
    return out


def eligible(
    asked: Sequence[str], need_bytes: int | None, catalog: Mapping[str, AcceleratorType]
) -> tuple[tuple[str, ...], str | None]:
    """The types a job may run on, in its order of preference, or why none can hold it.

    ``asked``: its ``resources.accelerator`` (() = any); ``need_bytes``: its plan's memory per
    GPU (None = unknown: nothing is ruled out). A job that asks for none and fits every known
    type keeps () (any); one that fits only some gets those, smallest card first (the big
    cards stay free for the jobs only they hold). A type of unknown memory is kept."""
    if need_bytes is None or not catalog:
        return tuple(asked), None
    cands = list(asked) or sorted(catalog, key=lambda t: (catalog[t].memory_bytes or 0, t))

    def holds(t: str) -> bool:
        c = catalog.get(t)
        return c is None or c.memory_bytes is None or c.memory_bytes >= need_bytes

    fit = tuple(t for t in cands if holds(t))
    if fit:
        return (() if not asked and len(fit) == len(cands) else fit), None
    sized = [catalog[t] for t in cands if t in catalog and catalog[t].memory_bytes is not None]
    big = max(sized, key=lambda c: c.memory_bytes or 0)
    return (), (
        f"the plan needs {need_bytes:,} bytes ({need_bytes / _GB:.1f} GiB) per GPU; the largest "
        f"card {'asked for' if asked else 'in the cluster'} is {big.name} with "
        f"{big.memory_bytes:,} bytes ({big.memory_gb:.0f} GiB)"
    )


# Card memory of Ray's common accelerator type names (lower-cased), GB; the admin's
# ``SHUNTER_ACCELERATOR_TYPES`` overrides and adds.
KNOWN_MEMORY_GB: dict[str, float] = {
    "h200": 141,
    "h100": 80,
    "a100-80g": 80,
    "a100-40g": 40,
    "l40s": 48,
    "a10g": 24,
    "l4": 24,
    "t4": 16,
}


def admin_catalog(raw: Mapping[str, Mapping[str, float]]) -> dict[str, AcceleratorType]:
    """``SHUNTER_ACCELERATOR_TYPES`` (``{"h100": {"memory_gb": 80, "weight": 2}}``; memory
    left out: ``KNOWN_MEMORY_GB``'s); raises ValueError naming a bad entry."""
    out: dict[str, AcceleratorType] = {}
    for name, v in raw.items():
        t = normalize(name)
        unknown = set(v) - {"memory_gb", "weight"}
        if unknown or float(v.get("weight", 1.0)) <= 0 or float(v.get("memory_gb", 1.0)) <= 0:
            raise ValueError(
                f"accelerator type {name!r}: give memory_gb > 0 and weight > 0 only, not {dict(v)}"
            )
        gb = v.get("memory_gb", KNOWN_MEMORY_GB.get(t))
        mem = None if gb is None else int(float(gb) * _GB)
        out[t] = AcceleratorType(name=t, memory_bytes=mem, weight=float(v.get("weight", 1.0)))
    return out


def node_type(
    *, current: str, node_group: str, address: str, node_id: str, overrides: Mapping[str, str]
) -> str:
    """A node's type: the admin's for its node group, address or id (in that order), else
    what Ray says (``current``)."""
    for key in (node_group, address, node_id):
        if key and key in overrides:
            return normalize(overrides[key])
    return current


def gpu_weights(settings: Any) -> dict[str, float]:
    """Per type the weight of its GPU-hours in budgets and usage, from the settings'
    ``accelerator_types`` (read by attribute); types left out count 1."""
    raw = getattr(settings, "accelerator_types", None) or {}
    return {k: v.weight for k, v in admin_catalog(raw).items() if v.weight != 1.0}
