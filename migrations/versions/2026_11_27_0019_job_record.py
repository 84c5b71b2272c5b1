"""a job's reproduction facts: ``jobs.submitted_spec`` (what the user sent, in the user's
form with every default written out: what ``GET /v1/jobs/{id}/spec`` returns and a clone
starts from) and ``jobs.record`` (code and package versions, data and model fingerprints,
seed: ``service.jobs.reproduce``). Both nullable: older jobs have neither.

Plain ``ADD COLUMN``/``DROP COLUMN`` on both databases (no batch copy-and-move, which on
SQLite would drop the change-tracking triggers of migration 0017). Those triggers list the jobs
columns that stamp a row; this migration writes the list again with ``inputs`` (0018),
``submitted_spec`` and ``record`` in it (tests/service/scheduler/test_incremental_snapshot.py
checks every column), and its downgrade writes 0017's list back before dropping them.

Revision ID: 0019_job_record
Revises: 0018_team_objects
Create Date: 2026-11-27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_job_record"
down_revision: str | None = "0018_team_objects"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# 0017's list of the jobs columns that stamp a row (a literal copy: a migration is history).
_OLD = (
    "id, team, name, status, priority, spec, created_by, created_at, updated_at, started_at, "
    "finished_at, attempt, infra_retries, num_workers, cpus_per_worker, gpus_per_worker, "
    "progress_step, progress_total_steps, progress_epoch, latest_metrics, latest_checkpoint, "
    "resume_from, error_type, error_message, final_model_uri, cancel_requested, restarts"
)
_NEW = _OLD + ", inputs, submitted_spec, record"


def _jobs_trigger(columns: str) -> list[str]:
    """The jobs update trigger of 0017, over ``columns``."""
    if op.get_bind().dialect.name == "sqlite":
        return [
            "DROP TRIGGER IF EXISTS jobs_change_seq",
            f"""CREATE TRIGGER jobs_change_seq AFTER UPDATE OF {columns} ON jobs BEGIN
        UPDATE change_counters SET value = value + 1 WHERE name = 'changes';
        UPDATE jobs SET change_seq = (SELECT value FROM change_counters WHERE name = 'changes')
        WHERE id = NEW.id;
    END""",
        ]
    return [
        "DROP TRIGGER IF EXISTS jobs_change_seq ON jobs",
        f"""CREATE TRIGGER jobs_change_seq BEFORE INSERT OR UPDATE OF {columns} ON jobs
    FOR EACH ROW EXECUTE FUNCTION shunter_change_seq()""",
    ]


def upgrade() -> None:
    op.add_column("jobs", sa.Column("submitted_spec", sa.JSON(), nullable=True))
    op.add_column("jobs", sa.Column("record", sa.JSON(), nullable=True))
    for ddl in _jobs_trigger(_NEW):
        op.execute(ddl)


def downgrade() -> None:
    for ddl in _jobs_trigger(_OLD):
        op.execute(ddl)
    op.drop_column("jobs", "record")
    op.drop_column("jobs", "submitted_spec")
