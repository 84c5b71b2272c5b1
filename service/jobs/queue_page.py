"""``GET /v1/queue``: the queue as the scheduler's last tick stored it, one page at a time.

Order: the stored ``queue_position`` (the scheduler's ``policy.planner``), then jobs no tick has
placed yet, oldest first. Positions are global (all teams). A member sees its own team's rows
in full and every other team's queued job only as anonymous capacity: ``anonymous: true``,
its position, priority and size, but no id, name, team, time or reason; job ids of other
teams inside its own rows' reasons are redacted too (``service.jobs.privacy``). Admins see
everything. Pagination: ``next_cursor`` is the last position of the page.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.accounts.auth import Principal
from service.db.paging import decode_cursor, encode_cursor
from service.db.rows import from_row
from service.db.tables import Job
from service.jobs.privacy import redact_reasons
from service.schemas.cluster import QueueItem, QueuePage

__all__ = ["queue_page"]


def queue_page(
    session: Session, *, principal: Principal, limit: int, cursor: str | None = None
) -> QueuePage:
    """One page of the queue after position ``cursor`` (see the module docstring)."""
    after = max(decode_cursor(cursor, int) or 0, 0)
    rows = session.execute(
        select(
            Job.id,
            Job.name,
            Job.team,
            Job.priority,
            Job.created_at,
            Job.pending_reason,
            Job.estimated_start_at,
            Job.estimated_start_p90_at,
            Job.estimated_at,
            Job.queue_stale,
            Job.num_workers,
            Job.cpus_per_worker,
            Job.gpus_per_worker,
        )
        .where(Job.status == "queued")
        .order_by(Job.queue_position.is_(None), Job.queue_position, Job.created_at, Job.id)
    ).all()
    page = list(enumerate(rows, start=1))[after : after + limit]
    known = {r.id: r.team for r in rows}
    reasons = redact_reasons(
        session,
        principal=principal,
        reasons=[r.pending_reason for _, r in page],
        known_teams=known,
    )
    items = [
        _item(n, r, reason, visible=principal.sees_team(r.team))
        for (n, r), reason in zip(page, reasons, strict=True)
    ]
    more = after + limit < len(rows)
    return QueuePage(data=items, next_cursor=encode_cursor(after + limit) if more else None)


def _item(position: int, r: Any, reason: str | None, *, visible: bool) -> QueueItem:
    common = {
        "position": position,
        "priority": r.priority,
        "num_workers": r.num_workers,
        "cpus_per_worker": r.cpus_per_worker,
        "gpus_per_worker": r.gpus_per_worker,
    }
    if not visible:
        return QueueItem(anonymous=True, **common)
    # The job's own columns as selected; the reason as the caller may read it.
    return from_row(
        QueueItem, r, pending_reason=reason, estimate_stale=bool(r.queue_stale), **common
    )
