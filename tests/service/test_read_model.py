"""``GET /v1/jobs/{id}`` reads the stored queue position (one primary-key read, no queue
count); submit, resume and a requeue write a first position by the policy's static order,
and the scheduler's tick (simulated here by writing the column) is what a GET shows after."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event, update
from svc_helpers import bearer, submit, tiny_spec

from service.db.tables import Job


def _position(client: Any, token: str, job_id: str) -> int | None:
    r = client.get(f"/v1/jobs/{job_id}", headers=bearer(token))
    assert r.status_code == 200, r.text
    value: int | None = r.json()["queue_position"]
    return value


def test_first_positions_follow_the_static_order(client: Any, admin_token: str) -> None:
    a = submit(client, admin_token, tiny_spec("a"))["id"]
    b = submit(client, admin_token, tiny_spec("b"))["id"]
    low = submit(client, admin_token, {**tiny_spec("low"), "priority": "low"})["id"]
    high = submit(client, admin_token, {**tiny_spec("high"), "priority": "high"})
    assert high["queue_position"] == 1  # the submit reply carries it too
    got = {j: _position(client, admin_token, j) for j in (a, b, low, high["id"])}
    assert got == {high["id"]: 1, a: 2, b: 3, low: 4}
    q = client.get("/v1/queue", headers=bearer(admin_token)).json()["data"]
    assert [x["id"] for x in q] == [high["id"], a, b, low]


def test_get_shows_what_the_scheduler_stored_in_one_statement(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    db.write(
        lambda s: s.execute(
            update(Job).where(Job.id == job_id).values(queue_position=7, pending_reason="quota")
        )
    )
    _position(client, admin_token, job_id)  # warms the token cache
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    event.listen(db.hot_engine, "before_cursor_execute", seen)
    try:
        body = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    finally:
        event.remove(db.hot_engine, "before_cursor_execute", seen)
    assert (body["queue_position"], body["pending_reason"]) == (7, "quota")
    assert len(statements) == 1 and "FROM jobs" in statements[0]
    assert "count" not in statements[0].lower()
