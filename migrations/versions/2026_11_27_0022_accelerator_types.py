"""GPU types (issue 30 item 1): ``attempts.accelerator``, the type an attempt was placed on
(per-type quotas count it; GPU-hours are weighted by it), and ``teams.max_gpus_by_type``,
a team's GPU quota per type (JSON ``{"h100": 8}``); both nullable (untyped).

Plain ``ADD COLUMN`` (no batch copy-and-move, which on SQLite would drop migration 0017's
change-stamp triggers on ``attempts``).

Revision ID: 0022_accelerator_types
Revises: 0021_event_types
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022_accelerator_types"
down_revision: str | None = "0021_event_types"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("attempts", sa.Column("accelerator", sa.String(64), nullable=True))
    op.add_column("teams", sa.Column("max_gpus_by_type", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("teams", "max_gpus_by_type")
    op.drop_column("attempts", "accelerator")
