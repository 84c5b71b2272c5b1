"""The JobSpec (v1) schema: fields, defaults, enums and per-field bounds.

Exactly DESIGN.md's "JobSpec (v1)". Every object forbids unknown keys; every number is
bounded (the bounds are in each field's description, so they show in OpenAPI). Rules that
involve more than one field live in ``shunter.jobspec.rules``; path resolution in
``service.jobs.paths``. Decisions DESIGN.md left open, written down here:

- ``name``, ``model.task``, ``model`` and ``data.train`` are required; everything else has
  the default DESIGN.md shows.
- ``data.*.format`` may be omitted and is then inferred from the file suffix
  (``.csv``/``.tsv`` → csv with ``,``/tab delimiter, ``.json``, ``.jsonl``, ``.txt`` → text,
  ``.parquet``); the resolved spec always has it.
- ``eval_strategy``/``save_strategy`` accept YAML's ``no`` → ``false`` as ``"no"``.
- Types are strict: a number field takes a JSON/YAML number (an integer field an integer),
  a boolean field ``true``/``false``; ``"8"``, ``true`` for a count, ``8.0`` for an integer are
  422s naming the type expected. ``shunter.jobspec.parse`` reads YAML numbers as YAML does
  (plus ``5e-5``, a float in YAML 1.2). NaN and infinities are rejected everywhere.
- Every field has a ``description``: the JSON schema (``shunter.jobspec.schema``, served at
  ``GET /v1/jobspec.schema.json``, committed as ``docs/jobspec.schema.json``) and
  ``docs/jobspec-reference.md`` are generated from it (``scripts/gen_jobspec_docs.py``).

The sections live beside it by what they hold: ``spec_fields`` (enums, field types, the base
model), ``spec_inputs`` (model, data), ``spec_run`` (training, distributed, resources,
scheduling) and ``spec_health`` (health, notify); every name is re-exported here.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from shunter.jobspec import spec_fields, spec_health, spec_inputs, spec_run
from shunter.jobspec.spec_fields import *  # noqa: F403  (re-exported)
from shunter.jobspec.spec_fields import NAME_RE, StrictModel
from shunter.jobspec.spec_health import *  # noqa: F403  (re-exported)
from shunter.jobspec.spec_health import HealthSpec, NotifySpec
from shunter.jobspec.spec_inputs import *  # noqa: F403  (re-exported)
from shunter.jobspec.spec_inputs import DataSpec, ModelSpec
from shunter.jobspec.spec_run import *  # noqa: F403  (re-exported)
from shunter.jobspec.spec_run import DistributedSpec, ResourcesSpec, SchedulingSpec, TrainingSpec
from shunter.jobspec.vocab import Priority

__all__ = ["JobSpec"]
__all__ += spec_fields.__all__
__all__ += spec_inputs.__all__
__all__ += spec_run.__all__
__all__ += spec_health.__all__


class JobSpec(StrictModel):
    """A training job as submitted (and, after ``validate_spec``, as resolved)."""

    name: str = Field(
        min_length=1,
        max_length=63,
        json_schema_extra={"pattern": NAME_RE.pattern},
        description="lower-case letters, digits, '.', '_', '-'; ≤ 63 chars",
    )
    model: ModelSpec = Field(description="the model, its task and adapters")
    data: DataSpec = Field(description="datasets and columns")
    training: TrainingSpec = Field(
        default_factory=TrainingSpec, description="Hugging Face TrainingArguments names"
    )
    distributed: DistributedSpec = Field(
        default_factory=DistributedSpec, description="parallelism strategy"
    )
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="workers and their CPUs/GPUs"
    )
    scheduling: SchedulingSpec = Field(
        default_factory=SchedulingSpec, description="preemption and other scheduler treatment"
    )
    health: HealthSpec = Field(
        default_factory=HealthSpec, description="divergence guard and hang watch"
    )
    priority: Priority = Field("normal", description="scheduling priority: low | normal | high")
    max_restarts: int = Field(2, ge=0, le=100, description="Ray Train restarts, 0..100")
    max_runtime_seconds: int | None = Field(
        None, ge=1, le=31_536_000, description="1..31,536,000 (a year)"
    )
    notify: list[NotifySpec] = Field(
        default_factory=list,
        max_length=8,
        description="webhooks for this job's events, beside the team's defaults (≤ 8)",
    )

    @field_validator("name")
    @classmethod
    def _name_shape(cls, value: str) -> str:
        if not NAME_RE.fullmatch(value):
            raise ValueError(
                "use lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
            )
        return value

    @field_validator("notify")
    @classmethod
    def _notify_once_per_url(cls, value: list[NotifySpec]) -> list[NotifySpec]:
        urls = [n.url for n in value]
        if len(set(urls)) != len(urls):
            raise ValueError("name each URL once, with all its event types in one entry")
        return value
