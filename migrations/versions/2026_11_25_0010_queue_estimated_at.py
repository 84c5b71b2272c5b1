"""bounded scheduler work per tick: ``jobs.estimated_at`` (when the scheduler last computed a
queued job's position, reason and ETA) and ``jobs.queue_stale`` (the last tick did not reach
it: past ``SHUNTER_SCHEDULER_MAX_PLAN_DEPTH``, it keeps its last values).

Revision ID: 0010_queue_estimated_at
Revises: 0009_team_owed
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010_queue_estimated_at"
down_revision: str | None = "0009_team_owed"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("estimated_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(
            sa.Column("queue_stale", sa.Boolean(), server_default=sa.false(), nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("queue_stale")
        batch.drop_column("estimated_at")
