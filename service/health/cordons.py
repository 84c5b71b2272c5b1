"""The admin's view of straggler flags and node cordons (``node_cordons``), and lifting one.

Written by the straggler watch (``service.health.straggler``); read by
``GET /v1/admin/nodes`` and ``shunter admin nodes``; ``DELETE /v1/admin/nodes/{id}/cordon``
(``shunter admin uncordon``) ends a cordon early and clears the node's flags.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from service.accounts.auth import Principal, require_admin
from service.db.sqltime import as_utc
from service.db.tables import NodeCordon
from service.errors import NotFound
from service.schemas.cluster import NodeCordonRead

__all__ = ["lift_cordon", "list_nodes"]


def list_nodes(session: Session, *, principal: Principal, now: datetime) -> list[NodeCordonRead]:
    """Every flagged node, cordoned ones first."""
    require_admin(principal)
    out = []
    for row in session.execute(select(NodeCordon).order_by(NodeCordon.node_id)).scalars():
        until = as_utc(row.cordoned_until)
        out.append(
            NodeCordonRead(
                node_id=row.node_id,
                node_ip=row.node_ip,
                cordoned=until is not None and until > now,
                cordoned_until=until,
                flags=row.flags,
                total_flags=row.total_flags,
                last_flagged_at=as_utc(row.last_flagged_at),
                last_job_id=row.last_job_id,
                reason=row.reason,
            )
        )
    return sorted(out, key=lambda n: (not n.cordoned, n.node_id))


def lift_cordon(session: Session, *, principal: Principal, node_id: str) -> None:
    require_admin(principal)
    done = session.execute(
        update(NodeCordon)
        .where(NodeCordon.node_id == node_id)
        .values(cordoned_until=None, flags=0, reason="")
        .execution_options(synchronize_session=False)
    )
    if done.rowcount == 0:  # type: ignore[attr-defined]
        raise NotFound(f"node {node_id} was never flagged")
