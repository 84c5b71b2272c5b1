"""Optuna over our own tables: an in-memory study rebuilt from a sweep's rows at every pass.

Why not Optuna's ``RDBStorage`` on the service's database: it manages its own schema with its
own Alembic history (an ``alembic_version`` table of its own, which ours already owns), opens
its own engine and pool beside the app's, and keeps trial state (running, heartbeats) that
would have to agree with our job states. Instead the sweep's rows are the only state:
``sweep_trials`` holds each trial's sampled parameters and Optuna's per-trial system attributes
(a grid sampler's grid id, ASHA's completed rungs), and the objective's metric points are the
intermediate values. A study rebuilt from them answers exactly as the one that wrote them, on
SQLite and PostgreSQL alike, and a restart loses nothing: there is no other copy.

``TrialView`` is one trial as the controller read it; ``build_study`` makes the study;
``sample`` asks for the next parameters; ``prune_check`` feeds a running trial's new
intermediate values to the pruner one step at a time (as ``trial.report`` + ``should_prune``
would) and says at which step, if any, it is pruned.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import TrialState, create_trial

from shunter.jobspec.sweep import (
    AshaSettings,
    CategoricalDist,
    FloatDist,
    IntDist,
    MedianSettings,
    SweepSpec,
)

__all__ = [
    "PruneResult",
    "TrialView",
    "build_study",
    "distributions",
    "prune_check",
    "sample",
]

optuna.logging.set_verbosity(optuna.logging.WARNING)
log = logging.getLogger(__name__)

# Job status -> the Optuna state its trial has (queued/paused ones are "running" to Optuna:
# their parameters are taken).
_STATE = {
    "succeeded": TrialState.COMPLETE,
    "pruned": TrialState.PRUNED,
    "failed": TrialState.FAIL,
    "cancelled": TrialState.FAIL,
}


@dataclass(frozen=True, kw_only=True)
class TrialView:
    number: int
    status: str  # the job's
    params: Mapping[str, Any]
    optuna_attrs: Mapping[str, Any]
    values: Mapping[int, float]  # the objective per step (the newest attempt's value)
    checked_step: int | None = None  # the pruner has seen values up to this step


def distributions(spec: SweepSpec) -> dict[str, BaseDistribution]:
    out: dict[str, BaseDistribution] = {}
    for path, d in spec.space.items():
        if isinstance(d, FloatDist):
            out[path] = FloatDistribution(d.low, d.high, log=d.log)
        elif isinstance(d, IntDist):
            out[path] = IntDistribution(d.low, d.high, log=d.log, step=d.step)
        else:
            assert isinstance(d, CategoricalDist)
            out[path] = CategoricalDistribution(d.choices)
    return out


def _sampler(spec: SweepSpec, seed: int) -> optuna.samplers.BaseSampler:
    if spec.sampler == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if spec.sampler == "grid":
        grid: dict[str, Sequence[Any]] = {}
        for path, d in spec.space.items():
            grid[path] = d.choices if isinstance(d, CategoricalDist) else d.values()  # type: ignore[union-attr]
        return optuna.samplers.GridSampler(grid, seed=seed)
    startup = spec.sampler_settings.get("n_startup_trials", 4)
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup)


def _pruner(spec: SweepSpec, *, eval_steps: int) -> optuna.pruners.BasePruner:
    if spec.pruner == "asha":
        a = AshaSettings.model_validate(spec.pruner_settings)
        return optuna.pruners.SuccessiveHalvingPruner(
            min_resource=a.min_resource or eval_steps,
            reduction_factor=a.reduction_factor,
            min_early_stopping_rate=a.min_early_stopping_rate,
            bootstrap_count=a.bootstrap_count,
        )
    if spec.pruner == "median":
        m = MedianSettings.model_validate(spec.pruner_settings)
        return optuna.pruners.MedianPruner(
            n_startup_trials=m.n_startup_trials,
            n_warmup_steps=m.n_warmup_steps,
            interval_steps=m.interval_steps,
        )
    return optuna.pruners.NopPruner()


def _frozen(
    view: TrialView, dists: Mapping[str, BaseDistribution], *, upto: int | None
) -> optuna.trial.FrozenTrial:
    state = _STATE.get(view.status, TrialState.RUNNING)
    values = {s: v for s, v in view.values.items() if upto is None or s <= upto}
    value = None
    if state == TrialState.COMPLETE:
        if not values:  # finished without an objective: Optuna counts it failed
            state = TrialState.FAIL
        else:
            value = values[max(values)]  # the final evaluation, as the final model
    return create_trial(
        params=dict(view.params),
        distributions={k: dists[k] for k in view.params},
        value=value,
        intermediate_values=values,
        system_attrs=dict(view.optuna_attrs),
        state=state,
    )


def build_study(
    spec: SweepSpec,
    trials: Sequence[TrialView],
    *,
    seed: int,
    eval_steps: int,
    hold_back: int | None = None,
) -> optuna.Study:
    """An in-memory study holding ``trials`` in number order. ``hold_back``: that trial's
    intermediate values only up to its ``checked_step`` (the pruner is fed the rest)."""
    study = optuna.create_study(
        direction=spec.direction,
        sampler=_sampler(spec, seed),
        pruner=_pruner(spec, eval_steps=eval_steps),
    )
    dists = distributions(spec)
    for view in sorted(trials, key=lambda t: t.number):
        upto = None
        if view.number == hold_back:
            upto = view.checked_step if view.checked_step is not None else -1
        study.add_trial(_frozen(view, dists, upto=upto))
    return study


def sample(
    spec: SweepSpec, trials: Sequence[TrialView], *, seed: int, draw: int = 0, eval_steps: int
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The next trial's parameters and the Optuna system attributes its asking wrote.

    Deterministic: the sampler's seed is the sweep's ``seed`` plus the trial's number (and
    ``draw``, a redraw after a duplicate), so a sample lost to a crash before its commit is
    drawn again the same. A grid keeps the sweep's seed: its grid ids are the order its seed
    shuffles the grid into, and the ids stored with earlier trials must mean the same points.
    """
    if spec.sampler != "grid":
        seed = seed + len(trials) + 7919 * draw
    study = build_study(spec, trials, seed=seed, eval_steps=eval_steps)
    trial = study.ask(distributions(spec))
    attrs = study._storage.get_trial(trial._trial_id).system_attrs
    return dict(trial.params), _jsonable(attrs)


@dataclass(frozen=True, kw_only=True)
class PruneResult:
    pruned_at: int | None  # the step at which the pruner said stop; None: go on
    checked_step: int | None
    optuna_attrs: dict[str, Any] = field(default_factory=dict)


def prune_check(
    spec: SweepSpec,
    trials: Sequence[TrialView],
    number: int,
    *,
    seed: int,
    eval_steps: int,
) -> PruneResult:
    """Report trial ``number``'s values after its ``checked_step`` to the pruner, one step
    at a time; stop at the first step it prunes."""
    view = next(t for t in trials if t.number == number)
    study = build_study(spec, trials, seed=seed, eval_steps=eval_steps, hold_back=number)
    storage = study._storage
    # The study numbers its trials 0, 1, ... in our order (ours may have gaps).
    index = sorted(t.number for t in trials).index(number)
    trial_id = study.get_trials(deepcopy=False)[index]._trial_id
    checked = view.checked_step
    for step in sorted(s for s in view.values if checked is None or s > checked):
        storage.set_trial_intermediate_value(trial_id, step, view.values[step])
        checked = step
        if study.pruner.prune(study, storage.get_trial(trial_id)):
            attrs = _jsonable(storage.get_trial(trial_id).system_attrs)
            return PruneResult(pruned_at=step, checked_step=step, optuna_attrs=attrs)
    attrs = _jsonable(storage.get_trial(trial_id).system_attrs)
    return PruneResult(pruned_at=None, checked_step=checked, optuna_attrs=attrs)


def _jsonable(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """System attributes as JSON keeps them (a grid's search space has lists, not tuples)."""
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        if isinstance(value, Mapping):
            out[key] = {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
        else:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out
