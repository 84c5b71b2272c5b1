"""Each team's decayed usage history, from its attempts' run intervals, kept across ticks.

``Usage.shares(session, now=..., half_life_s=..., cluster=...)`` -> team -> decayed average
dominant share of the cluster (``policy.fairshare.decayed_average``, half-life
``SHUNTER_FAIRSHARE_HALF_LIFE_S``) over the attempts still running or ended within the
window (``WINDOW_HALF_LIVES`` half-lives: older ones weigh < 0.1%). The attempts are read
once and then only those of the jobs changed since the last read (``db.changes``); the
window moves with ``now``, so each call drops the attempts that left it. The averages are
summed in attempt id order whichever way the attempts were read, so a kept read and a full
one give the same floats. On a mixed cluster the average is kept per accelerator type (the
type each attempt ran on) and the share is per type (``fairshare.dominant_share``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.attempt_holds import HELD, running_after
from service.db.changes import ChangeCursor
from service.db.sqltime import as_utc
from service.db.tables import Attempt, Job
from service.launch import ClusterResources
from service.policy.capacity import totals
from service.policy.fairshare import GpuTypes, RunInterval, decayed_average, dominant_share

__all__ = ["WINDOW_HALF_LIVES", "Usage"]

WINDOW_HALF_LIVES = 10
_CHUNK = 5000  # bounded IN lists

# attempt id -> (team, its run interval, when it ended)
_Attempts = dict[int, tuple[str, RunInterval, datetime | None]]


def _read(
    session: Session, horizon: datetime, job_ids: Collection[str] | None
) -> dict[str, _Attempts]:
    """Job id -> its attempts running or ended after ``horizon`` (of ``job_ids``; None: of
    every job)."""
    stmt = (
        select(Attempt.job_id, Attempt.id, Job.team, *HELD)
        .join(Job, Job.id == Attempt.job_id)
        .where(running_after(horizon))
    )
    conn, rows = session.connection(), []
    if job_ids is None:
        rows = list(conn.execute(stmt))
    else:
        ordered = sorted(job_ids)
        for k in range(0, len(ordered), _CHUNK):
            rows += conn.execute(stmt.where(Attempt.job_id.in_(ordered[k : k + _CHUNK])))
    out: dict[str, _Attempts] = defaultdict(dict)
    for job_id, aid, team, started, ended, n, cpw, gpw, on in rows:
        end = None if ended is None else as_utc(ended)
        out[job_id][aid] = (
            team,
            RunInterval(
                start_s=as_utc(started).timestamp(),
                end_s=None if end is None else end.timestamp(),
                cpus=n * cpw,
                gpus=n * gpw,
                accelerator=on or "",
            ),
            end,
        )
    return out


class Usage:
    """See the module docstring. The live loop holds one; ``shares`` once per snapshot."""

    def __init__(self, *, full_every_s: float = 600.0) -> None:
        self.cursor = ChangeCursor(full_every_s=full_every_s)
        self._jobs: dict[str, _Attempts] = {}  # job id -> its attempts in the window
        self._horizon: datetime | None = None
        self._first_end: datetime | None = None  # the earliest end kept (None: none ended)
        self._per_team: dict[str, list[RunInterval]] | None = None  # built from ``_jobs``

    def shares(
        self,
        session: Session,
        *,
        now: datetime,
        half_life_s: float,
        cluster: ClusterResources,
        type_weights: Mapping[str, float] | None = None,
    ) -> dict[str, float]:
        """Team -> decayed average dominant share of the cluster, as of ``now`` (in the
        snapshot's read transaction; ``type_weights``: per type, on a mixed cluster)."""
        horizon = now - timedelta(seconds=WINDOW_HALF_LIVES * half_life_s)
        got = self.cursor.changes(session, len(self._jobs))
        jobs, first_end = self._jobs, self._first_end
        if got.ids is None or self._horizon is None or horizon < self._horizon:
            jobs = _read(session, horizon, None)  # in full (also when the window moved back)
            first_end = _first_end(jobs)
        elif got.ids:
            fresh = _read(session, horizon, got.ids)  # read within the window
            if fresh or any(i in jobs for i in got.ids):
                jobs = {i: a for i, a in jobs.items() if i not in got.ids} | fresh
                ends = [e for e in (first_end, _first_end(fresh)) if e is not None]
                first_end = min(ends, default=None)
        if first_end is not None and first_end <= horizon:
            jobs = _within(jobs, horizon)  # drop what left the window (it only moves on)
            first_end = _first_end(jobs)
        if jobs is not self._jobs:
            self._per_team = None
        self._first_end = first_end
        self._jobs, self._horizon = jobs, horizon
        self.cursor.done(got)
        if self._per_team is None:
            self._per_team = _per_team(jobs)
        return _shares(
            self._per_team,
            now=now,
            half_life_s=half_life_s,
            cluster=cluster,
            types=GpuTypes.of(totals(cluster.nodes), type_weights),
        )


def _first_end(jobs: dict[str, _Attempts]) -> datetime | None:
    """The earliest end among the attempts (None: none ended)."""
    return min((v[2] for a in jobs.values() for v in a.values() if v[2] is not None), default=None)


def _within(jobs: dict[str, _Attempts], horizon: datetime) -> dict[str, _Attempts]:
    out: dict[str, _Attempts] = {}
    for job_id, attempts in jobs.items():
        kept = {a: v for a, v in attempts.items() if v[2] is None or v[2] > horizon}
        if kept:
            out[job_id] = kept
    return out


def _per_team(jobs: dict[str, _Attempts]) -> dict[str, list[RunInterval]]:
    """Team -> its attempts' intervals, in attempt id order however they were read."""
    every = {aid: v for attempts in jobs.values() for aid, v in attempts.items()}
    out: dict[str, list[RunInterval]] = defaultdict(list)
    for aid in sorted(every):
        team, interval, _ = every[aid]
        out[team].append(interval)
    return out


def _shares(
    per_team: dict[str, list[RunInterval]],
    *,
    now: datetime,
    half_life_s: float,
    cluster: ClusterResources,
    types: GpuTypes | None,
) -> dict[str, float]:
    total_cpus = sum(n.total_cpus for n in cluster.nodes if n.alive)
    total_gpus = sum(n.total_gpus for n in cluster.nodes if n.alive)
    out = {}
    for team, ivs in per_team.items():
        by: dict[str, float] | None = None if types is None else {}
        cpus, gpus = decayed_average(
            ivs, now_s=now.timestamp(), half_life_s=half_life_s, by_type=by
        )
        out[team] = dominant_share(
            cpus, gpus, total_cpus=total_cpus, total_gpus=total_gpus, by_type=by, types=types
        )
    return out
