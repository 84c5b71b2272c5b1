"""preemption and pause: job status ``paused``, attempt status ``preempted``, the attempt's
checkpoint-now request (``stop_requested_at``, ``stop_cause``, ``stop_detail``) and the count of
worker-group restarts inside the current attempt (``jobs.restarts``).

Revision ID: 0003_preemption
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003_preemption"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JOB_OLD = "('queued', 'starting', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled')"
_JOB_NEW = _JOB_OLD[:-1] + ", 'paused')"
_ATTEMPT_OLD = "('active', 'succeeded', 'failed', 'cancelled', 'lost')"
_ATTEMPT_NEW = _ATTEMPT_OLD[:-1] + ", 'preempted')"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("restarts", sa.Integer(), server_default="0", nullable=False))
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint("status", f"status IN {_JOB_NEW}")
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("stop_requested_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("stop_cause", sa.String(length=16), nullable=True))
        batch.add_column(sa.Column("stop_detail", sa.Text(), nullable=True))
        batch.drop_constraint(op.f("ck_attempts_status"), type_="check")
        batch.create_check_constraint("status", f"status IN {_ATTEMPT_NEW}")
        batch.create_check_constraint(
            "stop_cause", "stop_cause IS NULL OR stop_cause IN ('preempt', 'pause')"
        )


def downgrade() -> None:
    # Rows in the new states have no old equivalent: a paused job goes back to the queue, a
    # preempted attempt reads as lost (what it was called before).
    op.execute("UPDATE jobs SET status = 'queued' WHERE status = 'paused'")
    op.execute("UPDATE attempts SET status = 'lost' WHERE status = 'preempted'")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_constraint(op.f("ck_attempts_stop_cause"), type_="check")
        batch.drop_constraint(op.f("ck_attempts_status"), type_="check")
        batch.create_check_constraint("status", f"status IN {_ATTEMPT_OLD}")
        batch.drop_column("stop_detail")
        batch.drop_column("stop_cause")
        batch.drop_column("stop_requested_at")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint("status", f"status IN {_JOB_OLD}")
        batch.drop_column("restarts")
