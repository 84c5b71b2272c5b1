"""node_cordons: nodes the straggler watch flagged, and until when they are cordoned.

Revision ID: 0016_node_cordons
Revises: 0015_webhooks
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016_node_cordons"
down_revision: str | None = "0015_webhooks"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "node_cordons",
        sa.Column("node_id", sa.String(length=128), nullable=False),
        sa.Column("node_ip", sa.String(length=255), nullable=False),
        sa.Column("flags", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("total_flags", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("last_flagged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_job_id", sa.String(length=40), nullable=True),
        sa.Column("cordoned_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("node_id", name=op.f("pk_node_cordons")),
    )


def downgrade() -> None:
    op.drop_table("node_cordons")
