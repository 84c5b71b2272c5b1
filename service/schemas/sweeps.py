"""Sweeps and their trials (``/v1/sweeps``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from service.schemas.base import Utc, _Out

__all__ = [
    "SweepRead",
    "SweepsPage",
    "TrialRead",
]


class TrialRead(_Out):
    """One trial of a sweep: an ordinary job (``job_id``) and the parameters sampled for it.
    ``objective``: the objective at the trial's last evaluation (what Optuna is told when it
    finishes); ``best_value`` / ``best_step``: its best evaluation."""

    number: int
    job_id: str
    status: str
    params: dict[str, Any]
    objective: float | None = None
    objective_step: int | None = None
    best_value: float | None = None
    best_step: int | None = None
    pruned_at_step: int | None = None
    created_at: Utc


class SweepRead(_Out):
    id: str
    name: str
    team: str
    status: str
    message: str = ""
    objective: str  # the metric point name, e.g. eval_accuracy
    direction: str
    max_trials: int
    max_parallel: int
    sampler: str
    pruner: str
    definition: dict[str, Any]  # the body as submitted (base, space, settings, budget)
    created_by: str | None
    created_at: Utc
    finished_at: Utc | None
    counts: dict[str, int]  # trials by job status
    gpu_hours_used: float = 0.0  # what the trials held (the sweep's own budget counts this)
    cpu_hours_used: float = 0.0
    trials: list[TrialRead] = Field(default_factory=list)
    # The finished trial with the best objective (its model: GET /v1/jobs/{job_id}/...).
    best_trial: TrialRead | None = None


class SweepsPage(_Out):
    data: list[SweepRead]
    next_cursor: str | None = None
