"""What the health watches do with a metrics batch the driver sent, once it is stored
(``service.jobs.attempts.add_metrics``), in the batch's transaction: the divergence guard's
points become events (``divergence``) and each window the batch completes is judged for
stragglers (``straggler``). Both look only at the batch's new points, so a retried batch
does nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from sqlalchemy.orm import Session

from service.db.tables import utcnow_py
from service.health.divergence import divergence_events
from service.health.straggler import CordonPolicy, judge_new_windows
from service.launch import StackTarget
from service.schemas.internal import MetricsIn

__all__ = ["after_metrics"]


def after_metrics(
    session: Session,
    *,
    job_id: str,
    attempt: int,
    body: MetricsIn,
    new: Iterable[tuple[str, int]],
    nodes: Callable[[], list[StackTarget]],
    cordon: CordonPolicy,
) -> None:
    """``new``: the (name, step) points this batch stored first; ``nodes``: where each rank
    runs, read only when a rank straggles."""
    new = sorted(new, key=lambda n: (n[1], n[0]))
    divergence_events(session, job_id, attempt, body, new)
    judge_new_windows(
        session,
        job_id=job_id,
        attempt=attempt,
        new=new,
        nodes=nodes,
        cordon=cordon,
        now=utcnow_py(),
    )
