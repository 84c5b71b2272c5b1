"""jobs (status, priority) index: a job entering the queue counts the queued jobs of its
priority class and the higher ones (``read_model.first_queue_position``) inside the submit's
write transaction; the index answers that count without reading each queued job's row.

Revision ID: 0008_jobs_status_priority
Revises: 0007_team_data_roots
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0008_jobs_status_priority"
down_revision: str | None = "0007_team_data_roots"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_jobs_status_priority", "jobs", ["status", "priority"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_priority", table_name="jobs")
