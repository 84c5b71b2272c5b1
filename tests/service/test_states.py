"""Job states: the move table, transition(), the claim CAS under a thread race, the
one-active-attempt constraint and leases on the database clock (the loss policy:
test_loss.py)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from svc_helpers import claim, submit

from service.accounts.auth import hash_token, new_token
from service.db.tables import Attempt, Event, Job
from service.errors import IllegalTransition, NotFound
from service.jobs.states import (
    LEGAL_MOVES,
    TERMINAL,
    ErrorInfo,
    JobStatus,
    can_move,
    claim_job,
    expired_attempts,
    heartbeat,
    transition,
)

S = JobStatus

# The table, written out independently of the code: DESIGN.md "Job states" + documented
# extensions (starting -> failed/cancelling; failed|cancelled -> queued by resume) + pause
# (docs/preemption.md: queued|starting|running -> paused; paused -> queued|cancelled).
EXPECTED = {
    ("queued", "starting"), ("queued", "cancelled"),
    ("starting", "running"), ("starting", "queued"), ("starting", "failed"),
    ("starting", "cancelling"),
    ("running", "succeeded"), ("running", "failed"), ("running", "cancelled"),
    ("running", "cancelling"), ("running", "queued"),
    ("cancelling", "cancelled"),
    ("failed", "queued"), ("cancelled", "queued"),
    ("queued", "paused"), ("starting", "paused"), ("running", "paused"),
    ("paused", "queued"), ("paused", "cancelled"),
    ("queued", "pruned"), ("starting", "pruned"), ("running", "pruned"), ("paused", "pruned"),
}  # fmt: skip


@pytest.mark.parametrize("source", list(S))
@pytest.mark.parametrize("target", list(S))
def test_move_table_every_pair(source: JobStatus, target: JobStatus) -> None:
    assert can_move(source, target) == ((source.value, target.value) in EXPECTED)


def test_succeeded_never_moves_and_terminal_leave_only_by_resume() -> None:
    assert LEGAL_MOVES[S.SUCCEEDED] == frozenset()
    assert LEGAL_MOVES[S.PRUNED] == frozenset()  # a pruned trial is never resumed
    for t in TERMINAL:
        assert LEGAL_MOVES[t] <= {S.QUEUED}


def _set_status(db: Any, job_id: str, status: str) -> None:
    db.write(lambda s: s.execute(update(Job).where(Job.id == job_id).values(status=status)))


def test_transition_performs_exactly_the_legal_moves(
    client: Any, admin_token: str, db: Any
) -> None:
    for source in S:
        for target in S:
            job_id = submit(client, admin_token)["id"]
            _set_status(db, job_id, source.value)
            if (source.value, target.value) in EXPECTED:
                job = db.write(lambda s, j=job_id, t=target: transition(s, job_id=j, to=t))
                assert job.status == target.value
                last = db.read(
                    lambda s, j=job_id: s.execute(
                        select(Event).where(Event.job_id == j).order_by(Event.id.desc()).limit(1)
                    ).scalar_one()
                )
                assert (last.from_status, last.to_status) == (source.value, target.value)
            else:
                with pytest.raises(IllegalTransition):
                    db.write(lambda s, j=job_id, t=target: transition(s, job_id=j, to=t))
                assert db.read(lambda s, j=job_id: s.get(Job, j)).status == source.value


def test_transition_expect_from_and_unknown_job(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    with pytest.raises(IllegalTransition):
        db.write(lambda s: transition(s, job_id=job_id, to=S.CANCELLED, expect_from={S.RUNNING}))
    with pytest.raises(NotFound):
        db.write(lambda s: transition(s, job_id="job-nope", to=S.CANCELLED))


def test_terminal_sets_finished_and_error_and_closes_attempt(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    number, _ = claim(db, job_id)
    db.write(lambda s: transition(s, job_id=job_id, to=S.RUNNING))
    db.write(
        lambda s: transition(
            s, job_id=job_id, to=S.FAILED, error=ErrorInfo(type="oom", message="out of memory")
        )
    )
    job = db.read(lambda s: s.get(Job, job_id))
    assert (job.error_type, job.error_message) == ("oom", "out of memory")
    assert job.started_at is not None and job.finished_at is not None
    att = db.read(lambda s: s.execute(select(Attempt).where(Attempt.job_id == job_id)).scalar_one())
    assert (att.number, att.status) == (number, "failed")
    assert att.ended_at is not None


def test_claim_race_exactly_one_wins(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    n = 12
    barrier = threading.Barrier(n)
    results: list[Any] = []
    errors: list[BaseException] = []

    def worker() -> None:
        token_hash = hash_token(new_token())
        barrier.wait()
        try:
            got = db.write(lambda s: claim_job(s, job_id=job_id, token_hash=token_hash))
            results.append(got)
        except BaseException as exc:  # any error is a failure of the claim's safety
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    winners = [r for r in results if r is not None]
    assert len(results) == n and len(winners) == 1
    job = db.read(lambda s: s.get(Job, job_id))
    assert (job.status, job.attempt) == ("starting", 1)
    assert winners[0].number == 1 and winners[0].submission_id == f"{job_id}-1"


def test_claim_only_queued(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    claim(db, job_id)
    again = db.write(lambda s: claim_job(s, job_id=job_id, token_hash=hash_token(new_token())))
    assert again is None


def test_one_active_attempt_is_a_database_constraint(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    claim(db, job_id)
    row = db.read(lambda s: s.execute(select(Attempt)).scalar_one())

    def second_active(s: Any) -> None:
        s.add(
            Attempt(
                job_id=job_id,
                number=2,
                status="active",
                token_hash="x" * 64,
                submission_id=f"{job_id}-2",
                lease_expires_at=row.lease_expires_at,
                started_at=row.started_at,
            )
        )
        s.flush()

    with pytest.raises(IntegrityError):
        db.write(second_active)

    # An ended attempt beside the active one is fine.
    def second_lost(s: Any) -> None:
        s.add(
            Attempt(
                job_id=job_id,
                number=2,
                status="lost",
                token_hash="y" * 64,
                submission_id=f"{job_id}-2",
                lease_expires_at=row.lease_expires_at,
                started_at=row.started_at,
            )
        )

    db.write(second_lost)


def test_heartbeat_extends_lease_on_db_clock(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    number, _ = claim(db, job_id, lease_seconds=0.2)
    first = db.read(lambda s: s.execute(select(Attempt.lease_expires_at)).scalar_one())
    expires, cancel = db.write(
        lambda s: heartbeat(s, job_id=job_id, attempt=number, lease_seconds=60)
    )
    assert cancel is False
    assert (expires.replace(tzinfo=None) - first.replace(tzinfo=None)).total_seconds() > 50
    assert db.read(expired_attempts) == []
