"""The database and the launcher's cluster view -> one ``policy.Snapshot``.

Shared by the live loop and anything that shows the loop's decisions. Reads, per tick, in
one snapshot of the database: the queued and active jobs with their attempts (run time so
far, when each re-entered the queue, checkpoint-now requests) and each running attempt's
step rate from its metric points, of which the live loop re-reads only the jobs changed
since its last tick (``scheduler.job_rows``); and each team's weight, quota and decayed
usage history (``policy.fairshare.decayed_average`` over its attempts' run intervals,
half-life ``SHUNTER_FAIRSHARE_HALF_LIFE_S``). ``now`` is the database clock, the clock
attempts are stamped with; each running job's expected end is computed again from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db import changes
from service.db.sqltime import as_utc, utcnow
from service.db.tables import Team
from service.launch import ClusterResources
from service.policy import capacity
from service.policy.eta import running_end
from service.policy.snapshot import ActiveJob, Snapshot, TeamQuota, TeamState
from service.scheduler.job_rows import JobRow, JobRows
from service.scheduler.usage import Usage

__all__ = ["build_snapshot", "db_now"]


def db_now(session: Session) -> datetime:
    now: datetime = session.execute(select(utcnow())).scalar_one()
    return as_utc(now)


def _active_jobs(rows: JobRows, now: datetime) -> list[ActiveJob]:
    """Each active job with its expected end at ``now``; the one built last tick from the
    same row is reused while its end does not depend on the clock (no step rate: the end is
    its max_runtime bound, or unknown) and has not passed."""
    out: list[ActiveJob] = []
    built: dict[str, tuple[JobRow, ActiveJob]] = {}
    for r in rows.active():
        got = rows.built.get(r.entry.job_id)
        if got is not None and got[0] is r:
            end = got[1].expected_end_at
            if end is None or now <= end:
                out.append(got[1])
                built[r.entry.job_id] = got
                continue
        current = r.current
        started = as_utc(current.started_at) if current is not None else now
        steps_left = None
        if r.row.progress_total_steps is not None:
            steps_left = r.row.progress_total_steps - (r.row.progress_step or 0)
        rate = r.rate if current is not None else None
        end = running_end(
            now=now,
            started_at=started,
            steps_per_s=rate,
            steps_left=steps_left,
            max_runtime_s=r.entry.max_runtime_s,
            run_s_before=r.entry.run_s,
        )
        stopping = current is not None and current.stop_requested_at is not None
        a = ActiveJob(
            entry=r.entry,
            started_at=started,
            expected_end_at=end,
            preempting=stopping,
            accelerator=(current.accelerator or "") if current is not None else "",
        )
        out.append(a)
        clock_free = current is not None and (rate is None or rate <= 0 or steps_left is None)
        if clock_free:  # the end is the bound (max(bound, now) = bound until it passes)
            built[r.entry.job_id] = (r, a)
    rows.built = built
    return out


def build_snapshot(
    session: Session,
    *,
    cluster: ClusterResources,
    half_life_s: float,
    rows: JobRows | None = None,
    usage: Usage | None = None,
    type_weights: Mapping[str, float] | None = None,
) -> Snapshot:
    """One consistent view for ``policy.planner`` (one read transaction, one snapshot of the
    database). ``rows``, ``usage``: the jobs and the usage history kept from the last tick
    (``JobRows``, ``usage.Usage``), brought up to this snapshot; None reads them all."""
    changes.consistent(session)
    now = db_now(session)
    if rows is None:
        rows = JobRows()
    rows.refresh(session)
    active = _active_jobs(rows, now)
    history = (usage or Usage()).shares(
        session, now=now, half_life_s=half_life_s, cluster=cluster, type_weights=type_weights
    )
    teams = {
        t.name: TeamState(
            weight=t.weight,
            quota=TeamQuota(
                max_gpus=t.max_gpus,
                max_cpus=t.max_cpus,
                max_running_jobs=t.max_running_jobs,
                max_gpus_by_type=t.max_gpus_by_type or None,
            ),
            history_share=history.get(t.name, 0.0),
            owed_s=t.owed_s,
        )
        for t in session.execute(select(Team)).scalars()
    }
    return Snapshot(
        now=now,
        totals=capacity.totals(cluster.nodes),
        free=capacity.free_now(cluster.nodes, [a.entry for a in active]),
        queued=rows.queued(),
        active=active,
        teams=teams,
        type_weights=type_weights,
    )
