"""What the straggler metrics report (read at scrape time): the active jobs' latest window
metrics, their straggler events, and the nodes' flags and cordons. Read-only queries; the
Prometheus shapes are ``service.http.straggler_metrics``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.db.sqltime import as_utc
from service.db.tables import Event, Job, NodeCordon
from service.jobs.states import JobStatus
from shunter.jobspec.vocab import EventType

__all__ = ["NodeFlags", "StragglerView", "straggler_view"]

_ACTIVE = (str(JobStatus.STARTING), str(JobStatus.RUNNING))
_EVENTS = (str(EventType.STRAGGLER), str(EventType.THROUGHPUT_DROPPED))


@dataclass(frozen=True)
class NodeFlags:
    node_id: str
    node_ip: str
    total_flags: int
    cordoned: bool  # at the time of the read


@dataclass(frozen=True)
class StragglerView:
    latest: list[tuple[str, dict[str, Any]]]  # (job id, latest metrics) of the active jobs
    events: list[tuple[str, str, int]]  # (job id, type, count) of the active jobs
    nodes: list[NodeFlags]


def straggler_view(session: Session, *, now: datetime) -> StragglerView:
    latest = session.execute(
        select(Job.id, Job.latest_metrics).where(Job.status.in_(_ACTIVE))
    ).all()
    events = session.execute(
        select(Event.job_id, Event.type, func.count())
        .join(Job, Job.id == Event.job_id)
        .where(Job.status.in_(_ACTIVE), Event.type.in_(_EVENTS))
        .group_by(Event.job_id, Event.type)
    ).all()
    nodes = [
        NodeFlags(
            n.node_id,
            n.node_ip,
            int(n.total_flags),
            n.cordoned_until is not None and as_utc(n.cordoned_until) > now,
        )
        for n in session.execute(select(NodeCordon)).scalars()
    ]
    return StragglerView(
        latest=[(job_id, metrics or {}) for job_id, metrics in latest],
        events=[(job_id, kind, int(n)) for job_id, kind, n in events],
        nodes=nodes,
    )
