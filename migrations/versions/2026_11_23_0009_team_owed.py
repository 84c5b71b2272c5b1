"""fair share owed account: ``teams.owed_s`` (share-seconds the team is owed, negative when it
owes) and ``teams.owed_at`` (when the scheduler leader last advanced it).

Revision ID: 0009_team_owed
Revises: 0008_jobs_status_priority
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_team_owed"
down_revision: str | None = "0008_jobs_status_priority"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("owed_s", sa.Float(), server_default="0", nullable=False))
        batch.add_column(sa.Column("owed_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.drop_column("owed_at")
        batch.drop_column("owed_s")
