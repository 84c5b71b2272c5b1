"""The one attempt-loss policy (``service.jobs.attempt_loss``): the decision table, and
``lose_attempt`` for each cause: always marks the attempt ``lost``, one message format,
the lease condition only for LEASE_EXPIRED, and nothing when the attempt moved on."""

from __future__ import annotations

import time
from typing import Any

import pytest
from sqlalchemy import select
from svc_helpers import claim, submit

from service.db.tables import Attempt, Event, Job
from service.jobs.attempt_loss import (
    COUNTS_AS_INFRA_RETRY,
    LossCause,
    decide_after_loss,
    lose_attempt,
)
from service.jobs.states import JobStatus, expired_attempts, heartbeat

S = JobStatus
C = LossCause


@pytest.mark.parametrize(
    ("status", "cause", "used", "maximum", "to", "error_type", "after"),
    [
        (S.RUNNING, C.LEASE_EXPIRED, 0, 3, S.QUEUED, None, 1),
        (S.STARTING, C.DRIVER_ENDED, 2, 3, S.QUEUED, None, 3),
        (S.STARTING, C.LAUNCH_FAILED, 0, 1, S.QUEUED, None, 1),
        (S.RUNNING, C.LEASE_EXPIRED, 3, 3, S.FAILED, "retries_exhausted", 3),
        (S.STARTING, C.LAUNCH_FAILED, 0, 0, S.FAILED, "retries_exhausted", 0),
        (S.CANCELLING, C.DRIVER_ENDED, 0, 3, S.CANCELLED, "cancelled", 0),
        (S.CANCELLING, C.LEASE_EXPIRED, 9, 3, S.CANCELLED, "cancelled", 9),
    ],
)
def test_loss_policy_table(
    status: JobStatus,
    cause: LossCause,
    used: int,
    maximum: int,
    to: JobStatus,
    error_type: str | None,
    after: int,
) -> None:
    d = decide_after_loss(status=status, cause=cause, infra_retries=used, max_infra_retries=maximum)
    assert (d.to, d.error.type if d.error else None, d.infra_retries) == (to, error_type, after)


def test_every_cause_has_a_retry_rule() -> None:
    assert set(COUNTS_AS_INFRA_RETRY) == set(LossCause)


def _attempts(db: Any) -> list[tuple[int, str, str | None]]:
    return db.read(
        lambda s: [
            (a.number, a.status, a.end_reason)
            for a in s.execute(select(Attempt).order_by(Attempt.number)).scalars()
        ]
    )


def test_expired_lease_is_requeued_then_exhausted_with_last_reason(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    for round_ in (1, 2):
        number, _ = claim(db, job_id, lease_seconds=0.05)
        time.sleep(0.2)
        assert [a.job_id for a in db.read(expired_attempts)] == [job_id]
        job = db.write(
            lambda s, n=number: lose_attempt(
                s, job_id=job_id, attempt=n, cause=C.LEASE_EXPIRED, max_infra_retries=1
            )
        )
        assert job is not None
        if round_ == 1:
            assert (job.status, job.infra_retries, job.pending_reason) == (
                "queued",
                1,
                "requeued after attempt 1 was lost (lease expired)",
            )
        else:
            assert (job.status, job.error_type) == ("failed", "retries_exhausted")
            assert job.error_message == "1 infra retries used up; last: lease expired"
    assert _attempts(db) == [(1, "lost", "lease expired"), (2, "lost", "lease expired")]
    messages = db.read(
        lambda s: [
            e.message
            for e in s.execute(
                select(Event).where(Event.type == "attempt_lost").order_by(Event.id)
            ).scalars()
        ]
    )
    assert messages == [
        "attempt 1 lost (lease expired); requeued (1/1 infra retries)",
        "attempt 2 lost (lease expired); 1 infra retries used up",
    ]


def test_lease_expired_spares_an_attempt_that_heartbeated(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    number, _ = claim(db, job_id, lease_seconds=0.05)
    time.sleep(0.2)
    db.write(lambda s: heartbeat(s, job_id=job_id, attempt=number, lease_seconds=60))
    lost = db.write(
        lambda s: lose_attempt(
            s, job_id=job_id, attempt=number, cause=C.LEASE_EXPIRED, max_infra_retries=3
        )
    )
    assert lost is None
    assert db.read(lambda s: s.get(Job, job_id)).status == "starting"


@pytest.mark.parametrize("cause", [C.DRIVER_ENDED, C.LAUNCH_FAILED])
def test_other_causes_lose_a_live_lease_and_mark_it_lost(
    client: Any, admin_token: str, db: Any, cause: LossCause
) -> None:
    job_id = submit(client, admin_token)["id"]
    number, _ = claim(db, job_id, lease_seconds=60)  # lease still valid: no lease condition
    job = db.write(
        lambda s: lose_attempt(
            s, job_id=job_id, attempt=number, cause=cause, detail="boom", max_infra_retries=0
        )
    )
    assert job is not None and (job.status, job.error_type) == ("failed", "retries_exhausted")
    assert job.error_message is not None and job.error_message.endswith(": boom")
    assert [(n, st) for n, st, _ in _attempts(db)] == [(1, "lost")]
    # The attempt moved on: a second loss of the same number does nothing.
    again = db.write(
        lambda s: lose_attempt(s, job_id=job_id, attempt=number, cause=cause, max_infra_retries=0)
    )
    assert again is None
