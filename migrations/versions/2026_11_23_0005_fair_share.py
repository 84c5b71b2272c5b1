"""fair share: ``teams.max_priority`` (default ``normal``; teams holding an admin token get
``high``) and the scheduler leader's lease table ``scheduler_leases``.

Revision ID: 0005_fair_share
Revises: 0004_openai
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_fair_share"
down_revision: str | None = "0004_openai"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(
            sa.Column("max_priority", sa.String(length=8), server_default="normal", nullable=False)
        )
        batch.create_check_constraint("max_priority", "max_priority IN ('low', 'normal', 'high')")
    op.execute(
        "UPDATE teams SET max_priority = 'high' WHERE name IN "
        "(SELECT team FROM tokens WHERE role = 'admin' AND revoked_at IS NULL)"
    )
    op.create_table(
        "scheduler_leases",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("holder", sa.String(length=255), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduler_leases")),
    )


def downgrade() -> None:
    op.drop_table("scheduler_leases")
    with op.batch_alter_table("teams") as batch:
        batch.drop_constraint(op.f("ck_teams_max_priority"), type_="check")
        batch.drop_column("max_priority")
