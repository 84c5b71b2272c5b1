"""Creating a sweep: every check before anything is stored, then one row.

1. The body (``shunter.jobspec.sweep.check_sweep``): types, bounds, sampler, pruner.
2. The base spec: the same two validation passes as ``POST /v1/jobs`` (errors under ``base.``),
   and the objective is an eval metric its task reports, evaluated often enough to prune.
3. The space against the validator: the trial spec of every corner point of the space
   (``corner_points``: each parameter's bounds or choices) passes both passes and the team's
   checks (quota, priority cap, budget), so no sample can give an invalid spec. An error names
   the parameter's path (``space.resources.num_workers``) and the value that broke it.

Trials are sampled by the controller (``service.sweeps.controller``), never here, and each
sampled spec passes the same checks again before its job is queued.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_writer
from service.db.engine import Database
from service.db.ids import sortable_id
from service.db.tables import Sweep
from service.errors import Unprocessable
from service.jobs.submit import (
    SubmitContext,
    job_inputs,
    parse_document,
    team_checks,
    validate_document,
)
from shunter.jobspec import FieldError, JobSpec, format_spec_errors
from shunter.jobspec.rules import best_metric_names, effective_eval_steps
from shunter.jobspec.sweep import SweepSpec, check_sweep, corner_points, trial_document

__all__ = ["check_trial", "create_sweep", "new_sweep_id", "sweep_spec"]


def new_sweep_id() -> str:
    """``swp-`` and 26 characters that sort by creation time (``service.db.ids``)."""
    return sortable_id("swp")


def _unprocessable(errors: list[FieldError]) -> Unprocessable:
    body = format_spec_errors(errors)
    return Unprocessable(body["message"], detail=body["detail"])


def _field_errors(exc: Unprocessable) -> list[FieldError]:
    detail = exc.detail if isinstance(exc.detail, list) else []
    out = [FieldError(str(d.get("loc", "")), str(d.get("msg", ""))) for d in detail]
    return out or [FieldError("(root)", exc.message)]


def check_trial(document: Any, checks: SubmitContext) -> JobSpec:
    """Pass 1 and pass 2 of a trial's spec document (``Unprocessable`` listing errors)."""
    # As a submit checks it, with the admin's accelerator types (SHUNTER_ACCELERATOR_TYPES:
    # the names and card memories the memory plan is checked against, so a trial is narrowed
    # to the cards that hold it as its job would be), less the note on a cluster view Ray
    # could not refresh.
    return validate_document(document, replace(checks, cluster_note=None))


def sweep_spec(definition: Mapping[str, Any]) -> SweepSpec:
    """A stored definition as the typed spec (it passed ``check_sweep`` when stored; the
    service's own keys, ``eval_steps``, are left out)."""
    return SweepSpec.model_validate({k: v for k, v in definition.items() if k != "eval_steps"})


def _objective_errors(spec: SweepSpec, base: JobSpec) -> list[FieldError]:
    names = best_metric_names(base.model.task)
    metric = spec.objective if spec.objective.startswith("eval_") else f"eval_{spec.objective}"
    errors = []
    if metric not in names:
        choices = sorted(n for n in names if n.startswith("eval_"))
        errors.append(
            FieldError("objective", f"{base.model.task} trials report {choices}, not {metric!r}")
        )
    if base.data.eval is None:
        errors.append(
            FieldError("base.data.eval", "the objective is an eval metric: give eval data")
        )
    if base.training.eval_strategy == "no":
        errors.append(
            FieldError("base.training.eval_strategy", "trials must evaluate: set steps or epoch")
        )
    elif spec.pruner != "none" and base.training.eval_strategy != "steps":
        errors.append(
            FieldError(
                "base.training.eval_strategy",
                f"pruner {spec.pruner} reads evaluations during training: set steps",
            )
        )
    return errors


def _space_errors(spec: SweepSpec, checks: SubmitContext, session_check: Any) -> list[FieldError]:
    """Validate the trial spec of every corner point; name the parameters that broke it."""
    errors: dict[str, FieldError] = {}
    for point in corner_points(spec.space):
        try:
            resolved = check_trial(trial_document(spec.base, point), checks)
            session_check(resolved.model_dump(mode="json"))
        except Unprocessable as exc:
            for e in _field_errors(exc):
                for path in _blame(e.loc, point):
                    if f"space.{path}" not in errors:
                        errors[f"space.{path}"] = FieldError(
                            f"space.{path}",
                            f"{point[path]!r} gives an invalid trial spec ({e.loc}: {e.message}); "
                            "narrow the range",
                        )
    return list(errors.values())


def _blame(loc: str, point: Mapping[str, Any]) -> list[str]:
    """The parameters an error at ``loc`` comes from: those at or under it, or above it;
    else (a cross-field rule) every parameter of the point."""
    hit = [p for p in point if p == loc or p.startswith(loc + ".") or loc.startswith(p + ".")]
    return hit or list(point)


def create_sweep(
    db: Database,
    *,
    principal: Principal,
    raw: bytes,
    content_type: str | None,
    checks: SubmitContext,
) -> Sweep:
    """Check the sweep completely (422 naming the field; 403 for a spent hard budget) and
    store it ``running``; the controller samples its trials."""
    require_writer(principal)
    document = parse_document(raw, content_type)
    spec, errors = check_sweep(document)
    if spec is None or errors:
        raise _unprocessable(errors)
    try:
        base = check_trial(spec.base, checks)
    except Unprocessable as exc:
        errors = [FieldError(f"base.{e.loc}", e.message) for e in _field_errors(exc)]
        raise _unprocessable(errors) from None
    errors = _objective_errors(spec, base)
    if errors:
        raise _unprocessable(errors)

    def _team(resolved: dict[str, Any]) -> None:
        db.read(lambda s: team_checks(s, principal=principal, resolved=resolved))
        db.read(  # the datasets and models it names exist, for the team, with the columns
            lambda s: job_inputs(
                s,
                team=principal.team,
                resolved=resolved,
                storage=checks.storage,
                buckets=checks.data_buckets,
            )
        )

    _team(base.model_dump(mode="json"))  # the team may submit at all (budget: 403 here)
    errors = _space_errors(spec, checks, _team)
    if errors:
        raise _unprocessable(errors)
    definition = spec.model_dump(mode="json")
    definition["seed"] = spec.seed if spec.seed is not None else secrets.randbits(31)
    definition["eval_steps"] = effective_eval_steps(base)

    def _write(session: Session) -> Sweep:
        sweep = Sweep(
            id=new_sweep_id(),
            team=principal.team,
            name=spec.name,
            status="running",
            definition=definition,
            base=spec.base,
            max_trials=spec.max_trials,
            max_parallel=spec.max_parallel,
            seed=definition["seed"],
            message="sampling trials",
            created_by=principal.name,
        )
        session.add(sweep)
        session.flush()
        return sweep

    return db.write(_write)
