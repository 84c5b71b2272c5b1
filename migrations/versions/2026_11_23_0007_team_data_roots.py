"""team data roots: ``team_data_roots`` (a data root one team may read, added by an admin;
``SHUNTER_DATA_ROOTS`` stays the roots every team may read).

Revision ID: 0007_team_data_roots
Revises: 0006_audit_log
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_team_data_roots"
down_revision: str | None = "0006_audit_log"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "team_data_roots",
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("path", sa.String(length=4096), nullable=False),
        sa.Column("created_by", sa.String(length=127), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["team"], ["teams.name"], name=op.f("fk_team_data_roots_team_teams"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("team", "path", name=op.f("pk_team_data_roots")),
    )


def downgrade() -> None:
    op.drop_table("team_data_roots")
