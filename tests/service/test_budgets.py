"""Team budgets: PATCH /v1/teams/{name} budget, 403 (hard) or low priority (soft) once spent,
used and left on GET /v1/teams/{name}/usage, and the period arithmetic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import update

from service.accounts.budgets import current_period
from service.db.tables import Attempt
from tests.service.svc_helpers import bearer, claim, tiny_spec


def _spend(db: Any, job_id: str, *, seconds: float, end: bool = True) -> None:
    """Claim the job and make its attempt have held its CPUs for ``seconds`` until now."""
    number, _ = claim(db, job_id)
    now = datetime.now(UTC)
    db.write(
        lambda s: s.execute(
            update(Attempt)
            .where(Attempt.job_id == job_id, Attempt.number == number)
            .values(
                started_at=now - timedelta(seconds=seconds),
                ended_at=now if end else None,
                status="preempted" if end else "active",
            )
        )
    )


def test_patch_budget_is_validated_and_shown(
    client: Any, admin_token: str, make_token: Any
) -> None:
    make_token("ml", "member")
    h = bearer(admin_token)
    r = client.patch("/v1/teams/ml", json={"budget": {"period": "month"}}, headers=h)
    assert r.status_code == 422 and "gpu_hours or cpu_hours" in r.json()["message"]
    r = client.patch("/v1/teams/ml", json={"budget": {"cpu_hours": 1, "period": "year"}}, headers=h)
    assert r.status_code == 422 and "budget.period" in r.json()["message"]
    r = client.patch("/v1/teams/ml", json={"budget": {"gpu_hours": -1}}, headers=h)
    assert r.status_code == 422 and "budget.gpu_hours" in r.json()["message"]
    r = client.patch("/v1/teams/ml", json={"budget": {"cpu_hours": 1, "mode": "x"}}, headers=h)
    assert r.status_code == 422 and "budget.mode" in r.json()["message"]
    body = {"budget": {"gpu_hours": 2000, "period": "week", "starts": "2026-01-05T00:00:00Z"}}
    r = client.patch("/v1/teams/ml", json=body, headers=h)
    assert r.status_code == 200, r.text
    b = r.json()["budget"]
    assert b["gpu_hours"] == 2000 and b["cpu_hours"] is None and b["mode"] == "hard"
    assert b["gpu_hours_left"] == 2000 and b["cpu_hours_left"] is None and not b["exceeded"]
    assert datetime.fromisoformat(b["period_end"]) - datetime.fromisoformat(
        b["period_start"]
    ) == timedelta(days=7)
    r = client.patch("/v1/teams/ml", json={"budget": None}, headers=h)
    assert r.json()["budget"] is None


def test_hard_budget_refuses_the_next_submit_once_a_job_spent_it(
    client: Any, admin_token: str, make_token: Any, db: Any
) -> None:
    member = make_token("ml", "member")
    body = {"budget": {"cpu_hours": 0.01, "period": "month", "mode": "hard"}}  # 36 CPU-s
    assert client.patch("/v1/teams/ml", json=body, headers=bearer(admin_token)).status_code == 200
    first = client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member))
    assert first.status_code == 201, first.text
    _spend(db, first.json()["id"], seconds=40)  # 1 worker x 1 CPU x 40 s > 36 CPU-s
    r = client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member))
    assert r.status_code == 403, r.text
    msg = r.json()["message"]
    assert r.json()["detail"] == "budget_exceeded"
    assert "budget" in msg and "of 0.01 CPU-hours this month" in msg, msg
    # The dry run says the same; the usage call shows used and left.
    r = client.post("/v1/jobs?dry_run=true", json=tiny_spec(), headers=bearer(member))
    assert r.status_code == 403
    usage = client.get("/v1/teams/ml/usage", headers=bearer(member)).json()
    assert usage["budget"]["exceeded"] is True
    assert usage["budget"]["cpu_hours_used"] == pytest.approx(40 / 3600, rel=0.05)
    assert usage["budget"]["cpu_hours_left"] < 0
    # Another team is not affected.
    other = make_token("other", "member")
    assert client.post("/v1/jobs", json=tiny_spec(), headers=bearer(other)).status_code == 201


def test_soft_budget_queues_at_low_with_an_event(
    client: Any, admin_token: str, make_token: Any, db: Any
) -> None:
    member = make_token("ml", "member")
    body = {"budget": {"cpu_hours": 0.01, "mode": "soft"}}
    assert client.patch("/v1/teams/ml", json=body, headers=bearer(admin_token)).status_code == 200
    first = client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member)).json()
    assert first["priority"] == "normal"
    _spend(db, first["id"], seconds=20, end=False)  # still running: 20 s so far, under
    assert (
        client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member)).json()["priority"]
        == "normal"
    )
    _spend_more = datetime.now(UTC) - timedelta(seconds=50)
    db.write(
        lambda s: s.execute(
            update(Attempt).where(Attempt.job_id == first["id"]).values(started_at=_spend_more)
        )
    )  # the running attempt has now held 50 CPU-s: past 36
    r = client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member))
    assert r.status_code == 201, r.text
    assert r.json()["priority"] == "low"
    events = client.get(f"/v1/jobs/{r.json()['id']}/events", headers=bearer(member)).json()
    note = [e for e in events["data"] if e["type"] == "budget_exceeded"]
    assert note and "soft: queued at low priority" in note[0]["message"]


def test_budget_not_in_force_before_it_starts(
    client: Any, admin_token: str, make_token: Any, db: Any
) -> None:
    member = make_token("ml", "member")
    first = client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member)).json()
    _spend(db, first["id"], seconds=100)
    starts = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    body = {"budget": {"cpu_hours": 0.01, "starts": starts}}
    assert client.patch("/v1/teams/ml", json=body, headers=bearer(admin_token)).status_code == 200
    assert client.post("/v1/jobs", json=tiny_spec(), headers=bearer(member)).status_code == 201


@pytest.mark.parametrize(
    ("period", "starts", "now", "lo", "hi"),
    [
        ("week", "2026-01-05", "2026-01-05", "2026-01-05", "2026-01-12"),
        ("week", "2026-01-05", "2026-01-20", "2026-01-19", "2026-01-26"),
        ("month", "2026-01-31", "2026-02-15", "2026-01-31", "2026-02-28"),
        ("month", "2026-01-31", "2026-03-01", "2026-02-28", "2026-03-31"),
        ("month", "2026-01-20", "2026-03-10", "2026-02-20", "2026-03-20"),
        ("month", "2026-11-01", "2027-01-02", "2027-01-01", "2027-02-01"),
        ("month", "2026-05-01", "2026-04-01", "2026-05-01", "2026-06-01"),  # not yet started
    ],
)
def test_current_period(period: str, starts: str, now: str, lo: str, hi: str) -> None:
    def t(d: str) -> datetime:
        return datetime.fromisoformat(d).replace(tzinfo=UTC)

    assert current_period(period=period, starts=t(starts), now=t(now)) == (t(lo), t(hi))
