"""jobs: stored queue position and ETAs (written by the scheduler each tick)

The scheduler stores each queued job's position and pending reason once per tick (submit
and resume write a first value from the same plan code), so ``GET /v1/jobs/{id}`` is one
primary-key read. ``estimated_start_at`` / ``estimated_end_at`` are filled by the ETA policy.
The index serves the queue page in stored order.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("queue_position", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("estimated_start_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("estimated_end_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_jobs_status_queue_position", ["status", "queue_position"])


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_index("ix_jobs_status_queue_position")
        batch.drop_column("estimated_end_at")
        batch.drop_column("estimated_start_at")
        batch.drop_column("queue_position")
