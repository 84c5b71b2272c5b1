"""team_objects (datasets and base models in the store), object_refs (the jobs that use
them) and jobs.inputs (the objects a job's spec names, resolved at submit). Issue #28.

Revision ID: 0018_team_objects
Revises: 0017_change_seq
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_team_objects"
down_revision: str | None = "0017_change_seq"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "team_objects",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("team", sa.String(63), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("columns", sa.JSON(), nullable=False),
        sa.Column("rows", sa.BigInteger(), nullable=True),
        sa.Column("sample", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_by", sa.String(127), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("kind IN ('dataset', 'model')", name=op.f("ck_team_objects_kind")),
        sa.ForeignKeyConstraint(["team"], ["teams.name"], name=op.f("fk_team_objects_team_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_team_objects")),
    )
    op.create_index("ix_team_objects_team_id", "team_objects", ["team", "id"])
    op.create_index("ix_team_objects_digest", "team_objects", ["digest"])
    op.create_table(
        "object_refs",
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("object_id", sa.String(40), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["jobs.id"],
            name=op.f("fk_object_refs_job_id_jobs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("job_id", "object_id", name=op.f("pk_object_refs")),
    )
    op.create_index("ix_object_refs_digest", "object_refs", ["digest"])
    # ADD COLUMN: no table rebuild, so 0017's triggers on jobs stay in place on SQLite.
    op.add_column("jobs", sa.Column("inputs", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "inputs")
    op.drop_index("ix_object_refs_digest", table_name="object_refs")
    op.drop_table("object_refs")
    op.drop_index("ix_team_objects_digest", table_name="team_objects")
    op.drop_index("ix_team_objects_team_id", table_name="team_objects")
    op.drop_table("team_objects")
