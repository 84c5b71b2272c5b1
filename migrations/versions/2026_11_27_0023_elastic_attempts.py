"""Elastic jobs live (issue 30 item 2): ``attempts.num_workers``, the width an attempt runs at
(an elastic job's attempts differ; null on attempts older than this revision: the job's
``num_workers``), and the ``resized`` event type (every resize, with its reason and widths).

``attempts``: plain ``ADD COLUMN`` (a batch copy would drop migration 0017's change-stamp
triggers). ``events``: batch mode widens the type check, as 0021 made it (no triggers).

Revision ID: 0023_elastic_attempts
Revises: 0022_accelerator_types
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023_elastic_attempts"
down_revision: str | None = "0022_accelerator_types"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BEFORE = (
    "queued",
    "starting",
    "running",
    "cancelling",
    "succeeded",
    "failed",
    "cancelled",
    "paused",
    "pruned",
    "submitted",
    "budget_exceeded",
    "claimed",
    "phase",
    "cancel_requested",
    "resumed",
    "sweep_trial",
    "attempt_lost",
    "ray_head_lost",
    "worker_restarted",
    "preempting",
    "preempt_requested",
    "pause_requested",
    "prune_requested",
    "preempted",
    "hung",
    "straggler",
    "throughput_dropped",
    "step_skipped",
    "rolled_back",
)
_AFTER = (*_BEFORE, "resized")


def _check(types: tuple[str, ...]) -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_type"), type_="check")
        batch.create_check_constraint(
            op.f("ck_events_type"), f"type IN ({', '.join(repr(t) for t in types)})"
        )


def upgrade() -> None:
    op.add_column("attempts", sa.Column("num_workers", sa.Integer(), nullable=True))
    _check(_AFTER)


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM events WHERE type = 'resized'"))
    _check(_BEFORE)
    op.drop_column("attempts", "num_workers")
