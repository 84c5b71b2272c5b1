"""openai: uploaded files and fine-tuning jobs

``files`` holds OpenAI-style uploads (``/v1/files``, purpose ``fine-tune``) per team;
``fine_tuning_jobs`` keeps what a ``/v1/fine_tuning/jobs`` request said beyond the JobSpec
it was translated into (model name, file ids, suffix, hyperparameters, metadata, seed).

Revision ID: 0004_openai
Revises: 0003_preemption
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004_openai"
down_revision: str | None = "0003_preemption"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(127), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("purpose IN ('fine-tune')", name=op.f("ck_files_purpose")),
        sa.ForeignKeyConstraint(["team"], ["teams.name"], name=op.f("fk_files_team_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_index("ix_files_team_id", "files", ["team", "id"])
    op.create_table(
        "fine_tuning_jobs",
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("training_file", sa.String(40), nullable=False),
        sa.Column("validation_file", sa.String(40), nullable=True),
        sa.Column("suffix", sa.String(64), nullable=True),
        sa.Column("hyperparameters", sa.JSON(), nullable=False),
        sa.Column("user_metadata", sa.JSON(), nullable=True),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_fine_tuning_jobs_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_fine_tuning_jobs")),
    )


def downgrade() -> None:
    op.drop_table("fine_tuning_jobs")
    op.drop_index("ix_files_team_id", table_name="files")
    op.drop_table("files")
