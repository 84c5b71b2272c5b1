"""change tracking for the scheduler's incremental reads: ``jobs.change_seq`` and
``attempts.change_seq``, set by triggers on every write a kept read can see (not the
scheduler's own queue writes, nor lease renewals), and a count of deletions
(``change_counters`` row ``deletes``).

PostgreSQL: the writing transaction's id (``pg_current_xact_id()``), so a reader knows every
change its snapshot cannot see carries a stamp >= the snapshot's xmax or one of its
in-progress ids, whatever order the writers commit in. SQLite: one counter
(``change_counters``, row ``changes``) bumped per row written; SQLite admits one writer at a
time, so the counter grows in commit order. A deleted row leaves no stamp: every DELETE (and
TRUNCATE) of jobs or attempts bumps ``deletes`` instead. ``service.db.changes`` reads them
and has the argument; the attempts' triggers fire only on the columns the kept reads use
(not on lease renewals). On SQLite, a later migration that rebuilds ``jobs`` or ``attempts``
(batch mode's copy-and-move) drops these triggers and must create them again; until it
does, the readers find them missing and read everything every time.

Revision ID: 0017_change_seq
Revises: 0016_node_cordons
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017_change_seq"
down_revision: str | None = "0016_node_cordons"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The attempt columns the kept reads use (a literal copy: a migration is history).
_ATTEMPT_COLUMNS = (
    "job_id, number, status, submission_id, started_at, ended_at, stop_requested_at, stop_cause"
)
# Every jobs column but the scheduler's own output (queue_position, pending_reason,
# estimated_start_at, estimated_end_at, estimated_at, queue_stale) and change_seq: an UPDATE
# that sets only those is the leader writing its queue, which it applies to what it keeps.
# A later migration adding a jobs column adds it here (tests/service/scheduler/
# test_incremental_snapshot.py checks every column).
_JOB_COLUMNS = (
    "id, team, name, status, priority, spec, created_by, created_at, updated_at, started_at, "
    "finished_at, attempt, infra_retries, num_workers, cpus_per_worker, gpus_per_worker, "
    "progress_step, progress_total_steps, progress_epoch, latest_metrics, latest_checkpoint, "
    "resume_from, error_type, error_message, final_model_uri, cancel_requested, restarts"
)

_PG = [
    """CREATE FUNCTION shunter_change_seq() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.change_seq := pg_current_xact_id()::text::bigint;
        RETURN NEW;
    END $$""",
    f"""CREATE TRIGGER jobs_change_seq BEFORE INSERT OR UPDATE OF {_JOB_COLUMNS} ON jobs
    FOR EACH ROW EXECUTE FUNCTION shunter_change_seq()""",
    f"""CREATE TRIGGER attempts_change_seq BEFORE INSERT OR UPDATE OF {_ATTEMPT_COLUMNS}
    ON attempts FOR EACH ROW EXECUTE FUNCTION shunter_change_seq()""",
    """CREATE FUNCTION shunter_count_deletes() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO change_counters (name, value) VALUES ('deletes', 1)
        ON CONFLICT (name) DO UPDATE SET value = change_counters.value + 1;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER jobs_count_deletes AFTER DELETE OR TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION shunter_count_deletes()""",
    """CREATE TRIGGER attempts_count_deletes AFTER DELETE OR TRUNCATE ON attempts
    FOR EACH STATEMENT EXECUTE FUNCTION shunter_count_deletes()""",
]


def _bump(table: str) -> str:
    """One change: the counter grows by one and the row written takes its value."""
    return f"""BEGIN
        UPDATE change_counters SET value = value + 1 WHERE name = 'changes';
        UPDATE {table} SET change_seq = (SELECT value FROM change_counters WHERE name = 'changes')
        WHERE id = NEW.id;
    END"""


# AFTER triggers (SQLite cannot assign NEW); the inner UPDATE writes change_seq only, which
# the OF clauses exclude, so it never fires them again.
_SQLITE = [
    f"CREATE TRIGGER jobs_change_seq_insert AFTER INSERT ON jobs {_bump('jobs')}",
    f"CREATE TRIGGER jobs_change_seq AFTER UPDATE OF {_JOB_COLUMNS} ON jobs " + _bump("jobs"),
    f"CREATE TRIGGER attempts_change_seq_insert AFTER INSERT ON attempts {_bump('attempts')}",
    f"CREATE TRIGGER attempts_change_seq AFTER UPDATE OF {_ATTEMPT_COLUMNS} ON attempts "
    + _bump("attempts"),
    *(
        f"""CREATE TRIGGER {table}_count_deletes AFTER DELETE ON {table} BEGIN
        INSERT INTO change_counters (name, value) VALUES ('deletes', 1)
        ON CONFLICT (name) DO UPDATE SET value = value + 1;
    END"""
        for table in ("jobs", "attempts")
    ),
]


def upgrade() -> None:
    op.create_table(
        "change_counters",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_change_counters")),
    )
    op.execute("INSERT INTO change_counters (name, value) VALUES ('changes', 0)")
    for table in ("jobs", "attempts"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("change_seq", sa.BigInteger(), server_default="0", nullable=False)
            )
            batch.create_index(f"ix_{table}_change_seq", ["change_seq"])
    for ddl in _SQLITE if op.get_bind().dialect.name == "sqlite" else _PG:
        op.execute(ddl)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        for name in (
            "jobs_change_seq_insert",
            "jobs_change_seq",
            "attempts_change_seq_insert",
            "attempts_change_seq",
            "jobs_count_deletes",
            "attempts_count_deletes",
        ):
            op.execute(f"DROP TRIGGER {name}")
    else:
        for table in ("attempts", "jobs"):
            op.execute(f"DROP TRIGGER {table}_count_deletes ON {table}")
            op.execute(f"DROP TRIGGER {table}_change_seq ON {table}")
        op.execute("DROP FUNCTION shunter_count_deletes()")
        op.execute("DROP FUNCTION shunter_change_seq()")
    for table in ("attempts", "jobs"):
        with op.batch_alter_table(table) as batch:
            batch.drop_index(f"ix_{table}_change_seq")
            batch.drop_column("change_seq")
    op.drop_table("change_counters")
