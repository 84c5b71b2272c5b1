"""The outbox: a delivery row is written in the transaction that writes the job's event (and
vanishes with it on rollback), once per (endpoint, event), and claimed by one sender only."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.tables import WebhookDelivery, WebhookEndpoint, utcnow_py
from service.jobs.states import JobStatus, transition
from service.webhooks.events import WebhookEvent
from service.webhooks.outbox import enqueue
from service.webhooks.sender import claim_due
from service.webhooks.signing import new_secret
from tests.service.svc_helpers import claim, submit

S = JobStatus


def add_endpoint(db: Any, *, team: str = "default", events: list[str], url: str) -> str:
    def _add(s: Session) -> str:
        ep = WebhookEndpoint(
            id="whe_" + url[-6:].replace("/", "_"),
            team=team,
            url=url,
            description="",
            events=events,
            secret=new_secret(),
        )
        s.add(ep)
        s.flush()
        return ep.id

    return str(db.write(_add))


def deliveries(db: Any) -> list[WebhookDelivery]:
    return list(db.read(lambda s: s.execute(select(WebhookDelivery)).scalars().all()))


def test_terminal_move_queues_one_delivery_per_matching_endpoint(
    client: Any, db: Any, make_token: Any
) -> None:
    token = make_token("default")
    a = add_endpoint(db, events=["job.succeeded"], url="http://127.0.0.1:1/aaaaaa")
    add_endpoint(db, events=["job.failed"], url="http://127.0.0.1:1/bbbbbb")  # not this type
    job = submit(client, token)
    claim(db, job["id"])
    db.write(lambda s: transition(s, job_id=job["id"], to=S.RUNNING, event_type="running"))
    assert deliveries(db) == []  # running is no webhook type
    db.write(lambda s: transition(s, job_id=job["id"], to=S.SUCCEEDED, event_type="succeeded"))
    rows = deliveries(db)
    assert [(r.endpoint_id, r.type, r.status) for r in rows] == [(a, "job.succeeded", "pending")]
    body = json.loads(rows[0].body)
    assert body["type"] == "job.succeeded" and body["id"].startswith("evt_")
    assert body["data"]["id"] == job["id"] and body["data"]["status"] == "succeeded"
    assert body["data"]["team"] == "default"
    assert rows[0].msg_id.startswith("msg_") and len(rows[0].body) < 2048


def test_rolled_back_event_leaves_no_delivery(client: Any, db: Any, make_token: Any) -> None:
    token = make_token("default")
    add_endpoint(db, events=["job.cancelled"], url="http://127.0.0.1:1/cccccc")
    job = submit(client, token)

    def _cancel_then_fail(s: Session) -> None:
        transition(s, job_id=job["id"], to=S.CANCELLED, event_type="cancelled")
        raise RuntimeError("the transaction fails after the event was written")

    with pytest.raises(RuntimeError):
        db.write(_cancel_then_fail)
    assert deliveries(db) == []
    db.write(lambda s: transition(s, job_id=job["id"], to=S.CANCELLED, event_type="cancelled"))
    assert len(deliveries(db)) == 1


def test_same_event_queued_once_and_claimed_by_one_sender(
    client: Any, db: Any, make_token: Any
) -> None:
    token = make_token("default")
    add_endpoint(db, events=["job.checkpoint"], url="http://127.0.0.1:1/dddddd")
    job = submit(client, token)

    def _enqueue(s: Session) -> int:
        webhook = WebhookEvent(
            type_="job.checkpoint", event_key="checkpoint-1-10", created_at=utcnow_py()
        )
        return enqueue(s.connection(), job_id=job["id"], webhook=webhook)

    assert db.write(_enqueue) == 1
    assert db.write(_enqueue) == 0  # a retried batch, a second writer
    assert len(deliveries(db)) == 1
    first = db.write(lambda s: claim_due(s, limit=10, lease_s=60))
    second = db.write(lambda s: claim_due(s, limit=10, lease_s=60))
    assert len(first) == 1 and second == []


def test_job_notify_adds_types_for_that_job_only(client: Any, db: Any, make_token: Any) -> None:
    token = make_token("default")
    url = "http://127.0.0.1:1/eeeeee"
    add_endpoint(db, events=[], url=url)  # the team's default: nothing
    plain = submit(client, token)
    from sqlalchemy import update

    from service.db.tables import Job

    noisy = submit(client, token)
    db.write(
        lambda s: s.execute(
            update(Job)
            .where(Job.id == noisy["id"])
            .values(spec={**noisy["spec"], "notify": [{"url": url, "events": ["job.cancelled"]}]})
        )
    )
    for job in (plain, noisy):
        db.write(lambda s, j=job: transition(s, job_id=j["id"], to=S.CANCELLED))
    assert [r.job_id for r in deliveries(db)] == [noisy["id"]]


@pytest.mark.parametrize(
    ("event_type", "webhook"),
    [("hung", "job.hung"), ("rolled_back", "job.diverged"), ("straggler", "job.straggler"),
     ("preempted", "job.preempted"), ("step_skipped", None), ("worker_restarted", None)],
)  # fmt: skip
def test_health_events_map_to_their_webhook_types(
    client: Any, db: Any, make_token: Any, event_type: str, webhook: str | None
) -> None:
    from service.db.tables import Event

    token = make_token("default")
    add_endpoint(db, events=[], url="http://127.0.0.1:1/ffffff")  # types come from notify:
    job = submit(client, token)
    from sqlalchemy import update

    from service.db.tables import Job

    notify = [{"url": "http://127.0.0.1:1/ffffff"}]  # all types
    db.write(
        lambda s: s.execute(
            update(Job).where(Job.id == job["id"]).values(spec={**job["spec"], "notify": notify})
        )
    )
    db.write(lambda s: s.add(Event(job_id=job["id"], type=event_type, message="m")))
    assert [r.type for r in deliveries(db)] == ([webhook] if webhook else [])
