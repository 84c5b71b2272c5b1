"""Elastic jobs: ``resources.num_workers: {min, max}`` (an int keeps its rigid meaning).

The scheduler starts such a job on ``min`` workers and grows or shrinks it within the range
(``service.policy.elastic``); each resize is a checkpoint-now stop and an attempt on the new
width that resumes from the checkpoint. So the checkpoint must reshard onto another world
size, and the training must be the same at every width:

- **Strategies.** ``ddp`` and ``fsdp`` (FSDP2): their checkpoints are per-rank DCP shards
  that load onto any world size (trainer_core.checkpoint; 4 -> 2 ranks is tested). ``tp``,
  ``fsdp+tp`` and pipeline stages (``pipeline_parallel_size``) save DCP shards too, but
  their mesh has a fixed shape: they are accepted only when every width in the range is a
  valid mesh (each width is checked as a rigid spec, below). ``deepspeed`` is refused:
  ZeRO saves its own shard format for one world size (DeepSpeed's universal checkpoint
  conversion is not wired), so it stays rigid.
- **The global batch stays the same.** ``training.gradient_accumulation_steps`` is the
  accumulation at ``max`` workers; at ``w`` workers a step accumulates
  ``gradient_accumulation_steps x max / w`` micro-batches, so every step sees
  ``per_device_train_batch_size x gradient_accumulation_steps x max`` rows at any width
  (the attempt's spec carries ``resources.elastic_from``, and trainer_core then reads the
  data as one row stream cut into whole global batches, ``trainer_core.row_order``: step
  ``k`` takes the same rows at every width, across epoch boundaries too, and a resume on
  any width starts at the exact row; its loss is normalised by the global target count).
  Every width in the range must divide that evenly: 422 on
  ``training.gradient_accumulation_steps`` naming the smallest value that does.
  ``training.group_by_length`` is refused (its batch order depends on the width).
- **Every width is a valid rigid spec**: the layout rules run on the spec at each width
  (``at_width``); an error names the width it fails at.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from shunter.jobspec.errors import FieldError
from shunter.jobspec.spec import JobSpec, WorkerRange

__all__ = [
    "ELASTIC_STRATEGIES",
    "accumulation_at",
    "at_width",
    "attempt_errors",
    "elastic_errors",
    "start_width",
    "stored_at_width",
    "stored_range",
    "widths",
]

ELASTIC_STRATEGIES = frozenset({"ddp", "fsdp", "tp", "fsdp+tp"})


def widths(spec: JobSpec) -> range:
    r = spec.resources
    return range(r.min_workers, r.max_workers + 1)


def accumulation_at(spec: JobSpec, width: int) -> int:
    """Micro-batches per step at ``width`` workers: the global batch of ``max`` workers."""
    t, r = spec.training, spec.resources
    return t.gradient_accumulation_steps * r.max_workers // width


def at_width(spec: JobSpec, width: int) -> JobSpec:
    """The rigid spec an attempt on ``width`` workers runs (accumulation re-derived)."""
    if not spec.resources.elastic:
        return spec
    return spec.model_copy(
        update={
            "resources": spec.resources.model_copy(
                update={"num_workers": width, "elastic_from": spec.resources.num_workers}
            ),
            "training": spec.training.model_copy(
                update={"gradient_accumulation_steps": accumulation_at(spec, width)}
            ),
        }
    )


def stored_range(resources: Mapping[str, Any]) -> tuple[int, int] | None:
    """A stored (JSON) spec's ``resources``: an elastic job's (min, max), or None (rigid)."""
    n = resources.get("num_workers")
    if isinstance(n, Mapping):
        return int(n["min"]), int(n["max"])
    return None


def start_width(resources: Mapping[str, Any]) -> int:
    """The width a stored spec's job queues and starts at: ``min`` if elastic."""
    got = stored_range(resources)
    return got[0] if got is not None else int(resources["num_workers"])


def stored_at_width(spec: Mapping[str, Any], width: int | None) -> dict[str, Any]:
    """``at_width`` on a stored (JSON) spec: the rigid spec an attempt on ``width`` workers
    runs (``num_workers`` = width, accumulation re-derived); a rigid spec, or ``width`` None
    (an attempt older than widths), as it is."""
    got = stored_range(spec["resources"])
    if got is None or width is None:
        return dict(spec)
    if not got[0] <= width <= got[1]:
        raise ValueError(f"width {width} is outside num_workers {{min: {got[0]}, max: {got[1]}}}")
    training = dict(spec["training"])
    training["gradient_accumulation_steps"] = (
        int(training.get("gradient_accumulation_steps") or 1) * got[1] // width
    )
    resources = {
        **spec["resources"],
        "num_workers": width,
        "elastic_from": {"min": got[0], "max": got[1]},
    }
    return {**spec, "resources": resources, "training": training}


def attempt_errors(spec: JobSpec) -> Iterator[FieldError]:
    """``resources.elastic_from`` only on an attempt's spec: ``num_workers`` a width in it."""
    n, source = spec.resources.num_workers, spec.resources.elastic_from
    if source is not None and (isinstance(n, WorkerRange) or not source.min <= n <= source.max):
        yield FieldError(
            "resources.elastic_from",
            "is set by the service on an elastic job's attempt (num_workers a width within "
            "it); leave it out and give num_workers as {min, max}",
        )


def _smallest_accumulation(lo: int, hi: int) -> int:
    """The smallest a with a x hi divisible by every w in lo..hi."""
    return math.lcm(*(w // math.gcd(w, hi) for w in range(lo, hi + 1)))


def elastic_errors(
    spec: JobSpec, rigid_checks: Callable[[JobSpec], list[FieldError]]
) -> Iterator[FieldError]:
    """The rules above for an elastic spec (none for a rigid one); ``rigid_checks``: the
    cross-field rules, run on the spec at each width."""
    n = spec.resources.num_workers
    if not isinstance(n, WorkerRange):
        return
    if spec.resources.elastic_from is not None:
        yield from attempt_errors(spec)
        return
    rng = f"num_workers {{min: {n.min}, max: {n.max}}}"
    if spec.training.group_by_length:
        yield FieldError(
            "training.group_by_length",
            f"with {rng} every width must read the same rows per step; group_by_length "
            "sorts and shuffles batches per width: set it to false or use a fixed num_workers",
        )
    strategy = spec.distributed.strategy
    if strategy not in ELASTIC_STRATEGIES:
        yield FieldError(
            "resources.num_workers",
            f"{rng} needs checkpoints that reshard onto another world size: strategy ddp or "
            f"fsdp (or tp / fsdp+tp where every width is a valid mesh); {strategy} saves "
            "its own shards for one world size: use a fixed num_workers",
        )
        return
    accum = spec.training.gradient_accumulation_steps
    uneven = [w for w in widths(spec) if accum * n.max % w]
    if uneven:
        need = _smallest_accumulation(n.min, n.max)
        yield FieldError(
            "training.gradient_accumulation_steps",
            f"with {rng} the global batch (per_device_train_batch_size x "
            f"gradient_accumulation_steps x {n.max}) must split evenly over every width; at "
            f"{uneven[0]} workers {accum} x {n.max} / {uneven[0]} is not a whole number of "
            f"micro-batches: set gradient_accumulation_steps to a multiple of {need}",
        )
        return
    seen: set[str] = set()
    for w in widths(spec):
        for err in rigid_checks(at_width(spec, w)):
            if err.loc not in seen:
                seen.add(err.loc)
                yield FieldError(err.loc, f"{err.message} (at {w} workers of {rng})")
