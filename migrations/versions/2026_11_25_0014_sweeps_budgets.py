"""sweeps and budgets: a team's spending budget per period (``teams.budget_*``), the job status
``pruned`` and the attempt stop cause ``prune``, and the ``sweeps`` / ``sweep_trials`` tables
(a sweep's definition and state; each trial's sampled parameters, written in the transaction
that creates its job).

Revision ID: 0014_sweeps_budgets
Revises: 0010_queue_estimated_at
Create Date: 2026-11-25
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014_sweeps_budgets"
down_revision: str | None = "0010_queue_estimated_at"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JOB_OLD = (
    "('queued', 'starting', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled', 'paused')"
)
_JOB_NEW = _JOB_OLD[:-1] + ", 'pruned')"
_CAUSE_OLD = "stop_cause IS NULL OR stop_cause IN ('preempt', 'pause')"
_CAUSE_NEW = "stop_cause IS NULL OR stop_cause IN ('preempt', 'pause', 'prune')"


def upgrade() -> None:
    with op.batch_alter_table("teams") as batch:
        batch.add_column(sa.Column("budget_gpu_hours", sa.Float(), nullable=True))
        batch.add_column(sa.Column("budget_cpu_hours", sa.Float(), nullable=True))
        batch.add_column(sa.Column("budget_period", sa.String(length=8), nullable=True))
        batch.add_column(sa.Column("budget_starts", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("budget_mode", sa.String(length=8), nullable=True))
        batch.create_check_constraint(
            "budget_period", "budget_period IS NULL OR budget_period IN ('week', 'month')"
        )
        batch.create_check_constraint(
            "budget_mode", "budget_mode IS NULL OR budget_mode IN ('hard', 'soft')"
        )
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint("status", f"status IN {_JOB_NEW}")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_constraint(op.f("ck_attempts_stop_cause"), type_="check")
        batch.create_check_constraint("stop_cause", _CAUSE_NEW)
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("team", sa.String(length=63), nullable=False),
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("definition", sa.JSON(), nullable=False),
        sa.Column("base", sa.JSON(), nullable=False),
        sa.Column("max_trials", sa.Integer(), nullable=False),
        sa.Column("max_parallel", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False, server_default=""),
        sa.Column("created_by", sa.String(length=127), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'succeeded', 'cancelled', 'failed')",
            name=op.f("ck_sweeps_status"),
        ),
        sa.ForeignKeyConstraint(["team"], ["teams.name"], name=op.f("fk_sweeps_team_teams")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
    )
    op.create_index("ix_sweeps_team_id", "sweeps", ["team", "id"])
    op.create_index("ix_sweeps_status", "sweeps", ["status"])
    op.create_table(
        "sweep_trials",
        sa.Column("sweep_id", sa.String(length=40), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.String(length=40), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("params_sha256", sa.String(length=64), nullable=False),
        sa.Column("optuna_attrs", sa.JSON(), nullable=False),
        sa.Column("checked_step", sa.BigInteger(), nullable=True),
        sa.Column("pruned_at_step", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweeps.id"],
            name=op.f("fk_sweep_trials_sweep_id_sweeps"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["job_id"], ["jobs.id"], name=op.f("fk_sweep_trials_job_id_jobs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("sweep_id", "number", name=op.f("pk_sweep_trials")),
        sa.UniqueConstraint("job_id", name=op.f("uq_sweep_trials_job_id")),
        sa.UniqueConstraint("sweep_id", "params_sha256", name="uq_sweep_trials_params"),
    )


def downgrade() -> None:
    op.drop_table("sweep_trials")
    op.drop_index("ix_sweeps_status", table_name="sweeps")
    op.drop_index("ix_sweeps_team_id", table_name="sweeps")
    op.drop_table("sweeps")
    # A pruned job has no old equivalent: it reads as cancelled (stopped before its end).
    op.execute("UPDATE jobs SET status = 'cancelled' WHERE status = 'pruned'")
    op.execute("UPDATE attempts SET stop_cause = 'preempt' WHERE stop_cause = 'prune'")
    with op.batch_alter_table("attempts") as batch:
        batch.drop_constraint(op.f("ck_attempts_stop_cause"), type_="check")
        batch.create_check_constraint("stop_cause", _CAUSE_OLD)
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_status"), type_="check")
        batch.create_check_constraint("status", f"status IN {_JOB_OLD}")
    with op.batch_alter_table("teams") as batch:
        batch.drop_constraint(op.f("ck_teams_budget_mode"), type_="check")
        batch.drop_constraint(op.f("ck_teams_budget_period"), type_="check")
        batch.drop_column("budget_mode")
        batch.drop_column("budget_starts")
        batch.drop_column("budget_period")
        batch.drop_column("budget_cpu_hours")
        batch.drop_column("budget_gpu_hours")
