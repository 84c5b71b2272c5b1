"""``jobs.estimated_start_p90_at``: the late end of a queued job's start range (issue 30),
written by the leader with ``estimated_start_at``; nullable (None: no estimate).

A scheduler output like ``estimated_start_at``: left out of migration 0017's change-stamp
triggers (a leader's queue write is not a change the kept reads re-read). Plain ``ADD
COLUMN`` (no batch copy-and-move, which on SQLite would drop those triggers).

Revision ID: 0020_eta_p90
Revises: 0019_job_record
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020_eta_p90"
down_revision: str | None = "0019_job_record"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "jobs", sa.Column("estimated_start_p90_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    op.drop_column("jobs", "estimated_start_p90_at")
