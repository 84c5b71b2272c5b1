"""a job's reproduction facts: ``jobs.submitted_spec`` (what the user sent, in the user's
form with every default written out: what ``GET /v1/jobs/{id}/spec`` returns and a clone
starts from) and ``jobs.record`` (code and package versions, data and model fingerprints,
seed: ``service.jobs.reproduce``). Both nullable: older jobs have neither.

Plain ``ADD COLUMN`` on both databases (no batch copy-and-move, which on SQLite would drop
the change-tracking triggers of migration 0017).

Revision ID: 0019_job_record
Revises: 0018_team_objects
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_job_record"
down_revision: str | None = "0018_team_objects"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("submitted_spec", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("record", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("record")
        batch.drop_column("submitted_spec")
