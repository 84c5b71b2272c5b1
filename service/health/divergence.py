"""The divergence guard's events: ``trainer_core.health`` reports a skipped optimizer step
(``health_skipped_steps``) or a rollback to a checkpoint (``health_rollbacks``) as metrics;
each new point becomes one event (``step_skipped``, ``rolled_back``), in the batch's
transaction, so a retried batch writes no second event.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from sqlalchemy.orm import Session

from service.db.tables import Event
from service.schemas.internal import MetricsIn
from shunter.jobspec.vocab import EventType

__all__ = ["HEALTH_EVENTS", "divergence_events"]

# The divergence guard's metrics (trainer_core.health) -> one event each, written only when the
# point is new, so a retried batch writes no second event.
HEALTH_EVENTS = {
    "health_skipped_steps": EventType.STEP_SKIPPED,
    "health_rollbacks": EventType.ROLLED_BACK,
}


def divergence_events(
    session: Session, job_id: str, attempt: int, body: MetricsIn, new: Iterable[tuple[str, int]]
) -> None:
    by_step: dict[int, dict[str, float]] = {}
    for p in body.points:
        by_step.setdefault(p.step, {})[p.name] = p.value
    for name, step in sorted(new, key=lambda n: n[1]):
        if name not in HEALTH_EVENTS:
            continue
        at = by_step.get(step, {})
        if name == "health_skipped_steps":
            message = (
                f"step {step} skipped (optimizer step not taken): loss "
                f"{_num(at.get('health_skipped_loss'))}, grad norm "
                f"{_num(at.get('health_skipped_grad_norm'))}; {int(at[name])} skipped so far"
            )
        else:
            message = (
                f"rollback {int(at[name])} at step {step}: back to the checkpoint of step "
                f"{_num(at.get('health_rollback_to_step'))}, the data since skipped, seed now "
                f"{_num(at.get('health_seed'))}"
            )
        session.add(
            Event(job_id=job_id, type=HEALTH_EVENTS[name], message=message, attempt=attempt)
        )


def _num(value: float | None) -> str:
    if value is None:
        return "?"
    return f"{value:.6g}" if math.isfinite(value) else str(value)
