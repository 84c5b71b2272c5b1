"""Reading sweeps (``GET /v1/sweeps``, ``/v1/sweeps/{id}``) and cancelling one.

A trial's objective values are its job's metric points named like the objective, one per
step, the newest attempt's value where a resumed attempt evaluated a step again. The best
trial is the finished (``succeeded``) trial with the best objective at its last evaluation:
the value of the model it saved, the one ``GET /v1/jobs/{job_id}/checkpoints/final/download``
returns.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from datetime import UTC, datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_writer, visible
from service.accounts.budgets import usage_seconds
from service.db.engine import Database
from service.db.paging import keyset_page
from service.db.rows import from_row
from service.db.tables import Job, MetricPoint, Sweep, SweepTrial, utcnow_py
from service.errors import Conflict
from service.jobs.queries import cancel_job
from service.launch import Launcher
from service.schemas.sweeps import SweepRead, SweepsPage, TrialRead
from shunter.jobspec.sweep import objective_metric

__all__ = [
    "cancel_sweep",
    "get_sweep",
    "list_sweeps",
    "objective_values",
    "sweep_read",
    "visible_sweep",
]

_LIVE = ("queued", "starting", "running", "cancelling", "paused")


def visible_sweep(session: Session, *, principal: Principal, sweep_id: str) -> Sweep:
    return visible(principal, session.get(Sweep, sweep_id), f"sweep {sweep_id}")


def objective_values(
    session: Session, *, job_ids: Collection[str], metric: str
) -> dict[str, dict[int, float]]:
    """job id -> {step: value} of ``metric`` (the newest attempt's value per step)."""
    if not job_ids:
        return {}
    rows = session.execute(
        select(MetricPoint.job_id, MetricPoint.step, MetricPoint.value)
        .where(MetricPoint.job_id.in_(list(job_ids)), MetricPoint.name == metric)
        .order_by(MetricPoint.attempt, MetricPoint.id)
    )
    out: dict[str, dict[int, float]] = {j: {} for j in job_ids}
    for job_id, step, value in rows:
        out[job_id][int(step)] = float(value)
    return out


def _trial_read(
    t: SweepTrial, job: Job, values: Mapping[int, float], *, maximize: bool
) -> TrialRead:
    objective = step = best = best_step = None
    if values:
        step = max(values)
        objective = values[step]
        pick = max if maximize else min
        best_step = pick(values, key=lambda s: (values[s], -s) if maximize else (values[s], s))
        best = values[best_step]
    return from_row(
        TrialRead,
        t,
        status=job.status,
        objective=objective,
        objective_step=step,
        best_value=best,
        best_step=best_step,
    )


def sweep_read(session: Session, sweep: Sweep, *, with_trials: bool = True) -> SweepRead:
    d = sweep.definition
    rows = session.execute(
        select(SweepTrial, Job)
        .join(Job, Job.id == SweepTrial.job_id)
        .where(SweepTrial.sweep_id == sweep.id)
        .order_by(SweepTrial.number)
    ).all()
    metric = objective_metric(d["objective"])
    maximize = d["direction"] == "maximize"
    values = objective_values(session, job_ids=[j.id for _, j in rows], metric=metric)
    trials = [_trial_read(t, j, values[j.id], maximize=maximize) for t, j in rows]
    done = [t for t in trials if t.status == "succeeded" and t.objective is not None]
    best = None
    if done:
        pick = max if maximize else min
        best = pick(done, key=lambda t: (t.objective or 0.0, -t.number if maximize else t.number))
    gpu_s, cpu_s, _ = usage_seconds(
        session,
        team=sweep.team,
        since=None,
        until=datetime.now(UTC),
        job_ids=[j.id for _, j in rows],
    ) if rows else (0.0, 0.0, 0)  # fmt: skip
    return from_row(
        SweepRead,
        sweep,
        objective=metric,
        direction=d["direction"],
        sampler=d["sampler"],
        pruner=d["pruner"],
        definition={k: v for k, v in d.items() if k != "eval_steps"},
        counts=dict(Counter(t.status for t in trials)),
        gpu_hours_used=round(gpu_s / 3600, 6),
        cpu_hours_used=round(cpu_s / 3600, 6),
        trials=trials if with_trials else [],
        best_trial=best,
    )


def get_sweep(session: Session, *, principal: Principal, sweep_id: str) -> SweepRead:
    return sweep_read(session, visible_sweep(session, principal=principal, sweep_id=sweep_id))


def list_sweeps(
    session: Session, *, principal: Principal, limit: int, cursor: str | None
) -> SweepsPage:
    """The caller's team's sweeps (an admin's: all), newest first, without their trials."""
    q = select(Sweep).order_by(Sweep.id.desc())
    if not principal.is_admin:
        q = q.where(Sweep.team == principal.team)
    page, nxt = keyset_page(
        session, q, Sweep.id, cursor=cursor, limit=limit, kind=str, newest_first=True
    )
    return SweepsPage(
        data=[sweep_read(session, s, with_trials=False) for s in page], next_cursor=nxt
    )


def cancel_sweep(
    db: Database, *, principal: Principal, sweep_id: str, launcher: Launcher
) -> SweepRead:
    """Stop sampling (``cancelled``) and cancel every unfinished trial. Idempotent; a
    finished sweep stays as it is."""
    require_writer(principal)

    def _mark(session: Session) -> list[str]:
        sweep = visible_sweep(session, principal=principal, sweep_id=sweep_id)
        session.execute(
            update(Sweep)
            .where(Sweep.id == sweep.id, Sweep.status == "running")
            .values(
                status="cancelled",
                finished_at=utcnow_py(),
                message=f"cancelled by {principal.name}",
            )
        )
        live = session.execute(
            select(Job.id)
            .join(SweepTrial, SweepTrial.job_id == Job.id)
            .where(SweepTrial.sweep_id == sweep.id, Job.status.in_(_LIVE))
        )
        return list(live.scalars())

    for job_id in db.write(_mark):
        try:
            cancel_job(db, principal=principal, job_id=job_id, launcher=launcher)
        except Conflict:  # it finished meanwhile
            continue
    return db.read(lambda s: get_sweep(s, principal=principal, sweep_id=sweep_id))
