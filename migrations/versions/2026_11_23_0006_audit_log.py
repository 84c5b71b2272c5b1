"""audit log: ``audit_log`` rows for actions that leave no other trace (job deletion, gc).

Revision ID: 0006_audit_log
Revises: 0005_fair_share
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_audit_log"
down_revision: str | None = "0005_fair_share"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_log",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=127), nullable=False),
        sa.Column("actor_team", sa.String(length=63), nullable=True),
        sa.Column("action", sa.String(length=63), nullable=False),
        sa.Column("target", sa.String(length=127), nullable=False),
        sa.Column("target_team", sa.String(length=63), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index("ix_audit_log_time", "audit_log", ["time"])


def downgrade() -> None:
    op.drop_index("ix_audit_log_time", table_name="audit_log")
    op.drop_table("audit_log")
