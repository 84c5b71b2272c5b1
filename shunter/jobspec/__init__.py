"""The JobSpec (v1): the one definition of a training job, for client, service, worker and trainer.

Pure pydantic v2 + the standard library: importing it loads neither torch, ray, fastapi nor
sqlalchemy. ``validate(raw)`` is pass 1 of validation (schema: unknown keys, strict types,
bounds; cross-field rules; derived defaults) and is what the CLI's offline ``shunter
validate``, the worker and trainer_core call. The service adds pass 2 over the typed object
(``service.jobs.admission``: data roots, path resolution, a local model's config, the
cluster's capacity) and sends both passes' errors in one 422.

Exception tree: ``ValueError`` -> ``SpecError`` (``.errors: list[FieldError]``).
"""

from __future__ import annotations

from typing import Any

import pydantic

from shunter.jobspec.errors import ROOT_LOC, FieldError, SpecError, errors_from_pydantic
from shunter.jobspec.errors import format_spec_errors as format_spec_errors
from shunter.jobspec.rules import (
    cross_field_errors,
    default_greater_is_better,
    effective_eval_steps,
)
from shunter.jobspec.spec import (
    DataSource,
    DataSpec,
    DeepSpeedSpec,
    DistributedSpec,
    FsdpSpec,
    JobSpec,
    LoraSpec,
    ModelSpec,
    ResourcesSpec,
    TrainingSpec,
)

__all__ = [
    "DataSource",
    "DataSpec",
    "DeepSpeedSpec",
    "DistributedSpec",
    "FieldError",
    "FsdpSpec",
    "JobSpec",
    "LoraSpec",
    "ModelSpec",
    "ResourcesSpec",
    "SpecError",
    "TrainingSpec",
    "check",
    "fill_defaults",
    "format_spec_errors",
    "validate",
]


def check(raw: Any, *, service_mode: bool = True) -> tuple[JobSpec | None, list[FieldError]]:
    """Pass 1 without raising: the typed spec (None when the schema fails) and every error.

    ``service_mode``: the service owns ``training.output_dir``, so a user value is an error;
    torchrun users validate with ``service_mode=False``.
    """
    if not isinstance(raw, dict):
        return None, [FieldError(ROOT_LOC, "must be an object (a mapping of fields)")]
    try:
        spec = JobSpec.model_validate(raw)
    except pydantic.ValidationError as exc:
        return None, errors_from_pydantic(exc, JobSpec)
    errors = cross_field_errors(spec)
    if service_mode and spec.training.output_dir is not None:
        errors.append(
            FieldError(
                "training.output_dir",
                "must be null: the service sets it per job under SHUNTER_STORAGE",
            )
        )
    return spec, errors


def validate(raw: Any, *, service_mode: bool = True) -> JobSpec:
    """Pass 1: the typed spec with derived defaults filled, or ``SpecError`` with every error."""
    spec, errors = check(raw, service_mode=service_mode)
    if errors or spec is None:
        raise SpecError(errors)
    return fill_defaults(spec)


def fill_defaults(spec: JobSpec) -> JobSpec:
    """Write the defaults that depend on other fields into the spec, so it is explicit."""
    m, t = spec.model, spec.training
    model = m.model_copy(update={"tokenizer": m.tokenizer or m.name_or_path})
    training_updates: dict[str, Any] = {}
    if t.eval_strategy == "steps" and t.eval_steps is None:
        training_updates["eval_steps"] = effective_eval_steps(spec)
    if t.metric_for_best_model is not None and t.greater_is_better is None:
        training_updates["greater_is_better"] = default_greater_is_better(t.metric_for_best_model)
    training = t.model_copy(update=training_updates)
    return spec.model_copy(update={"model": model, "training": training})
