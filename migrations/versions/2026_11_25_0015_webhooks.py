"""webhooks: a team's endpoints (``webhook_endpoints``) and the delivery outbox
(``webhook_deliveries``: one row per endpoint and event, written with the event).

Revision ID: 0015_webhooks
Revises: 0014_sweeps_budgets
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015_webhooks"
down_revision: str | None = "0014_sweeps_budgets"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Literal copies (a migration is history): service.db.tables / shunter.jobspec.vocab.
_TYPES = (
    "('job.succeeded', 'job.failed', 'job.cancelled', 'job.preempted', 'job.hung', "
    "'job.diverged', 'job.straggler', 'job.checkpoint')"
)
_STATUSES = "('pending', 'delivered', 'failed')"


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("url", sa.String(length=2048), nullable=False),
        sa.Column("description", sa.String(length=255), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("secret", sa.String(length=128), nullable=False),
        sa.Column("previous_secret", sa.String(length=128), nullable=True),
        sa.Column("previous_secret_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_reason", sa.Text(), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("failing_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_by", sa.String(length=127), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["team"],
            ["teams.name"],
            name=op.f("fk_webhook_endpoints_team_teams"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_endpoints")),
        sa.UniqueConstraint("team", "url", name="uq_webhook_endpoints_team_url"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("msg_id", sa.String(length=40), nullable=False),
        sa.Column("endpoint_id", sa.String(length=40), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("event_key", sa.String(length=127), nullable=False),
        sa.Column("type", sa.String(length=31), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("claimed_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("claim_token", sa.String(length=32), nullable=True),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(f"status IN {_STATUSES}", name=op.f("ck_webhook_deliveries_status")),
        sa.CheckConstraint(f"type IN {_TYPES}", name=op.f("ck_webhook_deliveries_type")),
        sa.ForeignKeyConstraint(
            ["endpoint_id"],
            ["webhook_endpoints.id"],
            name=op.f("fk_webhook_deliveries_endpoint_id_webhook_endpoints"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint("msg_id", name=op.f("uq_webhook_deliveries_msg_id")),
        sa.UniqueConstraint(
            "endpoint_id", "event_key", name="uq_webhook_deliveries_endpoint_event"
        ),
    )
    op.create_index(
        "ix_webhook_deliveries_status_next", "webhook_deliveries", ["status", "next_attempt_at"]
    )
    op.create_index("ix_webhook_deliveries_team_id", "webhook_deliveries", ["team", "id"])
    op.create_index("ix_webhook_deliveries_job_id", "webhook_deliveries", ["job_id"])


def downgrade() -> None:
    op.drop_index("ix_webhook_deliveries_job_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_team_id", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_status_next", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_endpoints")
