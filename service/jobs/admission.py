"""Pass 2 of validation: what needs the server (data roots, paths, a local model's config).

``validate_spec(raw, data_roots=...)`` runs pass 1 (``shunter.jobspec.check``) and then, on the
typed object, resolves local paths inside the data roots and reads a local model's config; it
collects every error of both passes before raising ``SpecError``. The returned spec has
absolute, symlink-free local paths and every default filled, so
``spec.model_dump(mode="json")`` is what is stored and validating it again gives the same spec.
The cluster-capacity check (``resource_errors``) is the caller's, as it needs the launcher.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

from service.jobs.model_checks import model_folder_errors
from service.jobs.paths import (
    Resolved,
    local_model_config,
    model_config_errors,
    pipeline_layer_errors,
    resolve_location,
    tensor_parallel_head_errors,
)
from service.jobs.resources import resource_errors as resource_errors
from shunter.jobspec import FieldError, JobSpec, SpecError, check, fill_defaults
from shunter.jobspec.spec import is_store_ref
from shunter.jobspec.topology import model_type_from_name, tp_model_error

__all__ = ["resource_errors", "validate_spec"]


def validate_spec(
    raw: Any,
    *,
    data_roots: Sequence[str | PathLike[str]],
    service_mode: bool = True,
    allow_pickle_weights: bool = False,
) -> JobSpec:
    """Validate and resolve a submitted spec, or raise ``SpecError`` listing every problem.

    ``data_roots``: directories local paths may point into (relative paths are tried in
    this order). ``service_mode``: the service owns ``training.output_dir``, so a user value
    is rejected; torchrun users validate with ``service_mode=False``.
    ``allow_pickle_weights``: admin setting; off, a pickle-only model folder is rejected.
    """
    checked, errors = check(raw, service_mode=service_mode)
    if checked is None:
        raise SpecError(errors)
    spec = checked
    spec, path_errors = _resolve_paths(spec, [Path(r) for r in data_roots])
    errors += path_errors
    if not path_errors:
        errors += model_config_errors(spec) + tensor_parallel_head_errors(spec)
        errors += _tp_family_errors(spec) + pipeline_layer_errors(spec)
        errors += model_folder_errors(spec, allow_pickle_weights=allow_pickle_weights)
    if errors:
        raise SpecError(errors)
    return fill_defaults(spec)


def _tp_family_errors(spec: JobSpec) -> list[FieldError]:
    """TP has a plan for Llama-style families: read a local config's ``model_type``; for a
    hub id (no config before training) go by the family its name says, if any."""
    name = spec.model.name_or_path
    if name is None or spec.model.from_scratch:
        return []  # from_scratch: config_overrides.model_type, checked in pass 1
    config = local_model_config(spec)
    if config is not None:
        model_type = config.get("model_type")
    else:
        model_type = None if os.path.isabs(name) else model_type_from_name(name)
    if not isinstance(model_type, str):
        return []
    error = tp_model_error(spec, model_type, "model.name_or_path")
    return [] if error is None else [error]


def _resolve_paths(spec: JobSpec, roots: list[Path]) -> tuple[JobSpec, list[FieldError]]:
    errors: list[FieldError] = []

    def resolve(loc: str, raw: str | None, *, model: bool) -> str | None:
        if raw is None:
            return None
        if model and is_store_ref(raw):
            return raw  # a team object or a bucket: resolved against the database at submit
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
