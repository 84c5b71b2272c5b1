"""Team budgets: resource-hours a team's attempts may hold per period (Slurm's GrpTRESMins).

A budget is a limit on GPU-hours and/or CPU-hours per ``week`` or ``month``, periods counted
from ``budget_starts`` (default: the start of the calendar month or ISO week it was set in).
The current period is the one holding ``now`` (a month period starting on the 31st ends on
the last day of a shorter month). Use is what ``usage_seconds`` counts: the resource-seconds
every attempt of the team actually held inside the period, preempted, lost and still-running
attempts included (``GET /v1/teams/{name}/usage`` counts the same).

Past either limit, ``mode`` decides: ``hard`` refuses new submits (403 naming the budget),
``soft`` queues them at ``low`` priority. Jobs already queued or running are not touched.
Before ``budget_starts`` nothing is counted and nothing is refused.
"""

from __future__ import annotations

import calendar
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.attempt_holds import HELD, running_after
from service.db.sqltime import as_utc
from service.db.tables import Attempt, Job, Team
from service.schemas.teams import Budget, BudgetRead

__all__ = [
    "BudgetState",
    "apply_budget",
    "budget_read",
    "budget_state",
    "current_period",
    "usage_seconds",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def usage_seconds(
    session: Session,
    *,
    team: str,
    since: datetime | None,
    until: datetime,
    job_ids: Collection[str] | None = None,
    weights: Mapping[str, float] | None = None,
) -> tuple[float, float, int]:
    """(GPU-seconds, CPU-seconds, attempts) the team's attempts held in [since, until]
    (only those of ``job_ids`` when given: a sweep's trials). ``weights``: per accelerator
    type what a GPU-second on it counts (``SHUNTER_ACCELERATOR_TYPES``; an attempt of no
    type or of a type not named counts 1)."""
    start = since or _EPOCH
    only = [] if job_ids is None else [Job.id.in_(list(job_ids))]
    rows = session.execute(
        select(*HELD)
        .join(Job, Job.id == Attempt.job_id)
        .where(Job.team == team, *only, Attempt.started_at < until, running_after(start))
    ).all()
    gpu_s = cpu_s = 0.0
    for started, ended, workers, cpw, gpw, accelerator in rows:
        lo = max(as_utc(started), start)
        hi = min(as_utc(ended) if ended is not None else until, until)
        seconds = max((hi - lo).total_seconds(), 0.0)
        weight = (weights or {}).get(accelerator or "", 1.0)
        gpu_s += seconds * workers * gpw * weight
        cpu_s += seconds * workers * cpw
    return gpu_s, cpu_s, len(rows)


def _add_months(t: datetime, months: int) -> datetime:
    index = t.month - 1 + months
    year, month = t.year + index // 12, index % 12 + 1
    day = min(t.day, calendar.monthrange(year, month)[1])
    return t.replace(year=year, month=month, day=day)


def current_period(*, period: str, starts: datetime, now: datetime) -> tuple[datetime, datetime]:
    """The period [lo, hi) holding ``now``; before ``starts``, the first period."""
    starts = as_utc(starts)
    if period == "week":
        k = max(int((now - starts) // timedelta(days=7)), 0)
        lo = starts + timedelta(days=7 * k)
        return lo, lo + timedelta(days=7)
    k = max((now.year - starts.year) * 12 + now.month - starts.month, 0)
    lo = _add_months(starts, k)
    if lo > now and k > 0:  # e.g. starts on the 20th, now the 10th: last month's period
        k -= 1
        lo = _add_months(starts, k)
    return lo, _add_months(starts, k + 1)


@dataclass(frozen=True, kw_only=True)
class BudgetState:
    read: BudgetRead

    @property
    def exceeded(self) -> bool:
        return self.read.exceeded

    @property
    def mode(self) -> str:
        return self.read.mode

    def figure(self, team: str) -> str:
        """The budget in words: what was used of what, this period, and when it renews."""
        b = self.read
        parts = []
        if b.gpu_hours is not None:
            parts.append(f"{b.gpu_hours_used:.4g} of {b.gpu_hours:g} GPU-hours")
        if b.cpu_hours is not None:
            parts.append(f"{b.cpu_hours_used:.4g} of {b.cpu_hours:g} CPU-hours")
        return (
            f"budget: team {team!r} has used {' and '.join(parts)} this {b.period} "
            f"(since {b.period_start.isoformat()}; the next period starts "
            f"{b.period_end.isoformat()})"
        )


def budget_read(
    session: Session, team: Team, *, now: datetime, weights: Mapping[str, float] | None = None
) -> BudgetRead | None:
    """The team's budget and its current period's use (GPU-hours weighted per accelerator
    type by ``weights``); None when it has no budget."""
    if team.budget_period is None or team.budget_starts is None:
        return None
    lo, hi = current_period(period=team.budget_period, starts=team.budget_starts, now=now)
    if now < lo:  # not in force yet
        gpu_s = cpu_s = 0.0
    else:
        gpu_s, cpu_s, _ = usage_seconds(
            session, team=team.name, since=lo, until=now, weights=weights
        )
    gpu_h, cpu_h = gpu_s / 3600, cpu_s / 3600
    gpu_left = None if team.budget_gpu_hours is None else team.budget_gpu_hours - gpu_h
    cpu_left = None if team.budget_cpu_hours is None else team.budget_cpu_hours - cpu_h
    return BudgetRead(
        gpu_hours=team.budget_gpu_hours,
        cpu_hours=team.budget_cpu_hours,
        period=team.budget_period,
        starts=as_utc(team.budget_starts),
        mode=team.budget_mode or "hard",
        period_start=lo,
        period_end=hi,
        gpu_hours_used=round(gpu_h, 6),
        cpu_hours_used=round(cpu_h, 6),
        gpu_hours_left=None if gpu_left is None else round(gpu_left, 6),
        cpu_hours_left=None if cpu_left is None else round(cpu_left, 6),
        exceeded=any(left is not None and left <= 0 for left in (gpu_left, cpu_left)),
    )


def budget_state(
    session: Session,
    *,
    team: str,
    now: datetime | None = None,
    weights: Mapping[str, float] | None = None,
) -> BudgetState | None:
    """The team's budget now (None: no budget, or no such team)."""
    row = session.get(Team, team)
    if row is None:
        return None
    read = budget_read(session, row, now=now or datetime.now(UTC), weights=weights)
    return None if read is None else BudgetState(read=read)


def _calendar_start(period: str, now: datetime) -> datetime:
    """The start of ``now``'s calendar month, or of its ISO week (Monday), 00:00 UTC."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.replace(day=1) if period == "month" else day - timedelta(days=day.weekday())


def apply_budget(team: Team, budget: Budget | None, *, now: datetime) -> None:
    """Set (or, with None, remove) a team's budget; ``starts`` defaults to the start of the
    current calendar month (or ISO week), so periods are calendar months (weeks)."""
    if budget is None:
        team.budget_gpu_hours = team.budget_cpu_hours = None
        team.budget_period = team.budget_starts = team.budget_mode = None
        return
    team.budget_gpu_hours = budget.gpu_hours
    team.budget_cpu_hours = budget.cpu_hours
    team.budget_period = budget.period
    team.budget_starts = budget.starts or _calendar_start(budget.period, now)
    team.budget_mode = budget.mode
