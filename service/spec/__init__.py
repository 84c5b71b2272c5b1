"""JobSpec (v1): schema, cross-field rules, path resolution, and the one validation entry.

``validate_spec(raw, data_roots=..., service_mode=True)`` is what the API's ``POST /v1/jobs``,
the CLI's offline ``shunter validate`` and the worker all call. It checks, in order: the
schema (unknown keys, types, bounds), the cross-field rules (``service.spec.rules``), the
local paths (``service.spec.paths``), and the rules that need a local model's config. It
collects every problem it can before raising ``SpecError``; ``format_spec_errors`` turns
them into the 422 body. The returned spec has absolute, symlink-free local paths and every
default filled, so ``spec.model_dump(mode="json")`` is what is stored and returned and
validating it again gives the same spec.

Pure: no database, no FastAPI, no torch; only reads the filesystem under the data roots.

Exception tree: ``ValueError`` → ``SpecError`` (``.errors: list[FieldError]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import pydantic

from service.spec.errors import ROOT_LOC, FieldError, SpecError, errors_from_pydantic
from service.spec.errors import format_spec_errors as format_spec_errors
from service.spec.models import (
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
from service.spec.paths import (
    Resolved,
    model_config_errors,
    resolve_location,
    tensor_parallel_head_errors,
)
from service.spec.resources import resource_errors as resource_errors
from service.spec.rules import cross_field_errors, default_greater_is_better, effective_eval_steps

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
    "format_spec_errors",
    "resource_errors",
    "validate_spec",
]


def validate_spec(
    raw: Any, *, data_roots: Sequence[str | PathLike[str]], service_mode: bool = True
) -> JobSpec:
    """Validate and resolve a submitted spec, or raise ``SpecError`` listing every problem.

    ``data_roots``: directories local paths may point into (relative paths are tried in
    this order). ``service_mode``: the service owns ``training.output_dir``, so a user value
    is rejected; torchrun users validate with ``service_mode=False``.
    """
    if not isinstance(raw, dict):
        raise SpecError([FieldError(ROOT_LOC, "must be an object (a mapping of fields)")])
    try:
        spec = JobSpec.model_validate(raw)
    except pydantic.ValidationError as exc:
        raise SpecError(errors_from_pydantic(exc, JobSpec)) from None
    errors = cross_field_errors(spec)
    if service_mode and spec.training.output_dir is not None:
        errors.append(
            FieldError(
                "training.output_dir",
                "must be null: the service sets it per job under SHUNTER_STORAGE",
            )
        )
    spec, path_errors = _resolve_paths(spec, [Path(r) for r in data_roots])
    errors += path_errors
    if not path_errors:
        errors += model_config_errors(spec) + tensor_parallel_head_errors(spec)
    if errors:
        raise SpecError(errors)
    return _fill_defaults(spec)


def _resolve_paths(spec: JobSpec, roots: list[Path]) -> tuple[JobSpec, list[FieldError]]:
    errors: list[FieldError] = []

    def resolve(loc: str, raw: str | None, *, model: bool) -> str | None:
        if raw is None:
            return None
        got = resolve_location(loc, raw, roots=roots, allow_hub=model, want_dir=model)
        if isinstance(got, FieldError):
            errors.append(got)
            return raw
        assert isinstance(got, Resolved)
        return got.value

    m, d = spec.model, spec.data
    model = m.model_copy(
        update={
            "name_or_path": resolve("model.name_or_path", m.name_or_path, model=True),
            "tokenizer": resolve("model.tokenizer", m.tokenizer, model=True),
        }
    )
    train = d.train.model_copy(
        update={"path": resolve("data.train.path", d.train.path, model=False)}
    )
    eval_ = d.eval
    if eval_ is not None:
        eval_ = eval_.model_copy(
            update={"path": resolve("data.eval.path", eval_.path, model=False)}
        )
    data = d.model_copy(update={"train": train, "eval": eval_})
    return spec.model_copy(update={"model": model, "data": data}), errors


def _fill_defaults(spec: JobSpec) -> JobSpec:
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
