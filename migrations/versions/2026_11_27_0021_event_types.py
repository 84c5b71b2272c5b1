"""``events.type`` checked against ``shunter.jobspec.vocab.EventType`` (issue 31): the writers,
this constraint and the webhook map use the one list, so a misspelt or unknown type is refused
where it is written. The list is frozen here as of this revision; a later type needs a
migration that widens it (the model's constraint reads the enum).

Batch mode: SQLite changes a table's constraints by copying it (``events`` has no triggers to
lose; its index and foreign key are copied with it).

Revision ID: 0021_event_types
Revises: 0020_eta_p90
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0021_event_types"
down_revision: str | None = "0020_eta_p90"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TYPES = (
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


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.create_check_constraint(
            op.f("ck_events_type"), f"type IN ({', '.join(repr(t) for t in _TYPES)})"
        )


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_type"), type_="check")
