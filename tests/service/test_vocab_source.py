"""One list of each API word: the job-state enum, the database's CHECK lists, the client and
retention read ``shunter.jobspec.vocab`` (``test_migrations.py`` checks the migrations')."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from service.db import tables as db
from service.housekeeping.retention import JobAge, expired
from service.jobs.states import ACTIVE_STATES, TERMINAL, JobStatus
from shunter.client import responses as client
from shunter.jobspec import vocab


def test_job_status_enum_is_the_vocab_list() -> None:
    assert tuple(JobStatus) == vocab.JOB_STATUSES
    assert set(TERMINAL) == vocab.TERMINAL_STATUSES
    assert set(ACTIVE_STATES) == vocab.ACTIVE_STATUSES


def test_readers_use_the_vocab_lists() -> None:
    assert db.JOB_STATUSES is vocab.JOB_STATUSES
    assert db.PRIORITIES is vocab.PRIORITIES
    assert client.TERMINAL_STATUSES is vocab.TERMINAL_STATUSES


def test_retention_expires_exactly_the_terminal_statuses() -> None:
    then = datetime(2026, 1, 1, tzinfo=UTC)
    jobs = [JobAge(id=s, status=s, finished_at=then) for s in vocab.JOB_STATUSES]
    gone = expired(jobs, now=then + timedelta(days=2), older_than=timedelta(days=1))
    assert set(gone) == vocab.TERMINAL_STATUSES
