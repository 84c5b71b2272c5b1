"""A sweep: a hyperparameter search whose trials are ordinary jobs (``POST /v1/sweeps``).

``SweepSpec`` is the body: ``base`` (a JobSpec document), ``space`` (dotted spec paths ->
distributions), ``objective`` + ``direction``, ``max_trials``, ``max_parallel``, ``sampler``,
``pruner`` and an optional ``budget``. Pure pydantic + stdlib, like the JobSpec: the client
checks a sweep offline with ``check_sweep`` and the service runs the same checks first.

``trial_document(base, params)`` is the one place a trial's spec is built: the base document
with each sampled value set at its dotted path. ``corner_points(space)`` lists the points of
the space whose trial specs are validated at submit (every bound and choice of each
parameter, and the all-low / all-high corners, or every corner when there are few), so a space
that can produce an invalid spec is refused before anything runs.
"""

from __future__ import annotations

import copy
import itertools
import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, model_validator

from shunter.jobspec.errors import FieldError, errors_from_pydantic

__all__ = [
    "AshaSettings",
    "CategoricalDist",
    "Distribution",
    "FloatDist",
    "IntDist",
    "MedianSettings",
    "SweepBudget",
    "SweepSpec",
    "check_sweep",
    "corner_points",
    "grid_size",
    "objective_metric",
    "set_path",
    "trial_document",
]

# A path is a dotted route into the JobSpec document: letters, digits, underscores.
_PATH = r"^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)+$"
_FULL_PRODUCT_MAX = 64  # up to this many corners, check every one


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FloatDist(_Strict):
    type: Literal["float"]
    low: float
    high: float
    log: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> FloatDist:
        if not (math.isfinite(self.low) and math.isfinite(self.high)) or self.low > self.high:
            raise ValueError("need finite low <= high")
        if self.log and self.low <= 0:
            raise ValueError("a log distribution needs low > 0")
        return self


class IntDist(_Strict):
    type: Literal["int"]
    low: int
    high: int
    step: int = Field(default=1, ge=1)
    log: bool = False

    @model_validator(mode="after")
    def _bounds(self) -> IntDist:
        if self.low > self.high:
            raise ValueError("need low <= high")
        if self.log and (self.low < 1 or self.step != 1):
            raise ValueError("a log int distribution needs low >= 1 and step 1")
        return self

    def values(self) -> list[int]:
        return list(range(self.low, self.high + 1, self.step))


Choice = bool | int | float | str | None


class CategoricalDist(_Strict):
    type: Literal["categorical"]
    choices: list[Choice] = Field(min_length=1, max_length=1000)


Distribution = Annotated[FloatDist | IntDist | CategoricalDist, Field(discriminator="type")]


class AshaSettings(_Strict):
    """Asynchronous successive halving (Optuna's ``SuccessiveHalvingPruner``): a trial at
    rung r (step >= min_resource x reduction_factor^r) goes on only if its objective is in the
    top 1/reduction_factor of the trials that reached that rung."""

    min_resource: int | None = Field(default=None, ge=1, description="default: eval_steps")
    reduction_factor: int = Field(default=2, ge=2, le=100)
    min_early_stopping_rate: int = Field(default=0, ge=0, le=20)
    bootstrap_count: int = Field(default=0, ge=0, le=1000)


class MedianSettings(_Strict):
    """Optuna's ``MedianPruner``: stop a trial whose best value so far is worse than the
    median of earlier trials at the same step."""

    n_startup_trials: int = Field(default=2, ge=0, le=1000)
    n_warmup_steps: int = Field(default=0, ge=0)
    interval_steps: int = Field(default=1, ge=1)


class SweepBudget(_Strict):
    """Stop sampling new trials once the trials have held this much (running ones finish)."""

    gpu_hours: float | None = Field(default=None, ge=0, le=1e9)
    cpu_hours: float | None = Field(default=None, ge=0, le=1e10)

    @model_validator(mode="after")
    def _some_limit(self) -> SweepBudget:
        if self.gpu_hours is None and self.cpu_hours is None:
            raise ValueError("give gpu_hours or cpu_hours (or both)")
        return self


class SweepSpec(_Strict):
    name: str = Field(
        default="sweep", min_length=1, max_length=40, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
    )
    base: dict[str, Any]
    space: dict[Annotated[str, Field(pattern=_PATH)], Distribution] = Field(
        min_length=1, max_length=32
    )
    objective: str = Field(min_length=1, max_length=127)
    direction: Literal["maximize", "minimize"]
    max_trials: int = Field(ge=1, le=10_000)
    max_parallel: int = Field(default=1, ge=1, le=1000)
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    sampler_settings: dict[str, int] = Field(default_factory=dict)
    pruner: Literal["asha", "median", "none"] = "none"
    pruner_settings: dict[str, Any] = Field(default_factory=dict)
    budget: SweepBudget | None = None
    seed: int | None = Field(default=None, ge=0, lt=2**32)


def objective_metric(name: str) -> str:
    """The metric point name of an objective: ``accuracy`` and ``eval_accuracy`` both read
    ``eval_accuracy`` (trainer_core reports eval metrics with the ``eval_`` prefix)."""
    return name if name.startswith("eval_") else f"eval_{name}"


def _pruner_errors(spec: SweepSpec) -> list[FieldError]:
    models: dict[str, type[BaseModel]] = {"asha": AshaSettings, "median": MedianSettings}
    model = models.get(spec.pruner)
    if model is None:
        if spec.pruner_settings:
            return [FieldError("pruner_settings", "pruner none takes no settings")]
        return []
    try:
        model.model_validate(spec.pruner_settings)
    except pydantic.ValidationError as exc:
        return [
            FieldError(f"pruner_settings.{e.loc}", e.message)
            for e in errors_from_pydantic(exc, model)
        ]
    return []


def grid_size(space: Mapping[str, Any]) -> int | None:
    """Points of a grid over ``space``; None when a float range has no grid."""
    size = 1
    for dist in space.values():
        if isinstance(dist, CategoricalDist):
            size *= len(dist.choices)
        elif isinstance(dist, IntDist):
            size *= len(dist.values())
        else:
            return None
    return size


def _sampler_errors(spec: SweepSpec) -> list[FieldError]:
    known = {"tpe": {"n_startup_trials"}, "random": set(), "grid": set()}[spec.sampler]
    errors = [
        FieldError(f"sampler_settings.{k}", f"sampler {spec.sampler} has no setting {k!r}")
        for k in spec.sampler_settings
        if k not in known
    ]
    if spec.sampler == "grid":
        size = grid_size(spec.space)
        if size is None:
            floats = [p for p, d in spec.space.items() if isinstance(d, FloatDist)]
            errors.append(
                FieldError(
                    f"space.{floats[0]}",
                    "sampler grid needs discrete values: give this parameter as categorical "
                    "choices or an int range",
                )
            )
        elif spec.max_trials > size:
            errors.append(
                FieldError("max_trials", f"the grid has {size} points; ask for at most {size}")
            )
    size = grid_size(spec.space)
    if spec.sampler != "grid" and size is not None and spec.max_trials > size:
        errors.append(
            FieldError(
                "max_trials",
                f"the space has only {size} distinct points and no trial is sampled twice; "
                f"ask for at most {size}",
            )
        )
    return errors


def check_sweep(raw: Any) -> tuple[SweepSpec | None, list[FieldError]]:
    """Pass 1 of a sweep body (not its trial specs): types, bounds, sampler and pruner
    settings. Every error found, each naming its field."""
    if not isinstance(raw, dict):
        return None, [FieldError("(root)", "must be an object")]
    try:
        spec = SweepSpec.model_validate(raw)
    except pydantic.ValidationError as exc:
        return None, errors_from_pydantic(exc, SweepSpec)
    errors = _pruner_errors(spec) + _sampler_errors(spec)
    if spec.max_parallel > spec.max_trials:
        errors.append(FieldError("max_parallel", "must be at most max_trials"))
    if "training.output_dir" in spec.space:
        errors.append(
            FieldError("space.training.output_dir", "cannot be searched: the service sets it")
        )
    return spec, errors


def set_path(document: dict[str, Any], path: str, value: Any) -> None:
    """Set ``value`` at dotted ``path`` in ``document``, creating mappings on the way."""
    node = document
    keys = path.split(".")
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[keys[-1]] = value


def trial_document(base: Mapping[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """The trial's spec document: a copy of ``base`` with each parameter set at its path."""
    document = copy.deepcopy(dict(base))
    for path, value in params.items():
        set_path(document, path, value)
    return document


def _edges(dist: FloatDist | IntDist | CategoricalDist) -> list[Any]:
    if isinstance(dist, CategoricalDist):
        return list(dist.choices)
    if isinstance(dist, IntDist):
        values = dist.values()
        return sorted({values[0], values[-1]})
    return sorted({dist.low, dist.high})


def corner_points(
    space: Mapping[str, FloatDist | IntDist | CategoricalDist],
) -> list[dict[str, Any]]:
    """Points whose trial specs are validated at submit: every corner of the space when there
    are at most 64; otherwise each parameter's every edge (bounds, or every choice) with the
    others at their first edge, plus the all-last corner."""
    paths = list(space)
    edges = [_edges(space[p]) for p in paths]
    if math.prod(len(e) for e in edges) <= _FULL_PRODUCT_MAX:
        return [dict(zip(paths, combo, strict=True)) for combo in itertools.product(*edges)]
    first = {p: e[0] for p, e in zip(paths, edges, strict=True)}
    points = [first, {p: e[-1] for p, e in zip(paths, edges, strict=True)}]
    for p, e in zip(paths, edges, strict=True):
        points += [{**first, p: v} for v in e[1:]]
    return points
