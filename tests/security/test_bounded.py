"""Bounded responses: list pages carry summaries (no spec unless ?include=spec, capped),
/v1/queue is paginated with a cursor, and a member sees other teams' queued jobs only as
anonymous capacity. (On main 187a972 a 1,000-job page carried every full spec, /v1/queue
returned everything in one response, and reasons named other teams' job ids.)"""

from __future__ import annotations

from typing import Any

from sec_helpers import bearer, submit, tiny_spec
from sqlalchemy import update

from service.db.tables import Job

_BIG = {f"label_{i:04d}": "x" * 200 for i in range(200)}  # ~45 KB of config per spec


def _big_spec(n: int) -> dict[str, Any]:
    overrides = {**tiny_spec()["model"]["config_overrides"], "id2label": _BIG}
    return tiny_spec(name=f"big-{n}", model={"config_overrides": overrides})


def test_a_page_of_100_large_jobs_is_under_100_kb(client: Any, admin_token: str) -> None:
    for n in range(100):
        submit(client, admin_token, _big_spec(n))
    r = client.get("/v1/jobs", params={"limit": 100}, headers=bearer(admin_token))
    assert r.status_code == 200
    assert len(r.json()["data"]) == 100
    assert len(r.content) < 100_000, len(r.content)
    assert all(j["spec"] is None for j in r.json()["data"])
    # The spec is still on the job itself, and in lists on request, capped per page.
    job_id = r.json()["data"][0]["id"]
    one = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).json()
    assert one["spec"]["model"]["config_overrides"]["id2label"] == _BIG
    r = client.get(
        "/v1/jobs", params={"limit": 100, "include": "spec"}, headers=bearer(admin_token)
    )
    page = r.json()
    assert len(page["data"]) == 20 and page["next_cursor"] is not None  # spec_page_limit_max
    assert page["data"][0]["spec"]["name"].startswith("big-")


def test_queue_has_a_cursor(client: Any, admin_token: str) -> None:
    ids = [submit(client, admin_token, tiny_spec(name=f"q{n}"))["id"] for n in range(5)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        r = client.get("/v1/queue", params=params, headers=bearer(admin_token))
        assert r.status_code == 200, r.text
        page = r.json()
        assert len(page["data"]) <= 2
        seen += [item["id"] for item in page["data"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert pages == 3
    assert sorted(seen) == sorted(ids)
    positions = [item["position"] for item in page["data"]]
    assert positions == [5]


def test_queue_shows_other_teams_only_as_anonymous_capacity(
    client: Any, db: Any, make_token: Any
) -> None:
    alice = make_token("alpha")
    bob = make_token("beta")
    theirs = submit(client, bob, tiny_spec(name="secret-project"))["id"]
    mine = submit(client, alice, tiny_spec(name="mine"))["id"]
    reason = f"waiting for resources; skipped for now: {theirs}, behind it, fits and starts"
    db.write(lambda s: s.execute(update(Job).where(Job.id == mine).values(pending_reason=reason)))
    r = client.get("/v1/queue", headers=bearer(alice))
    body = r.text
    assert theirs not in body and "secret-project" not in body and "beta" not in body
    rows = r.json()["data"]
    anon = [row for row in rows if row["anonymous"]]
    assert len(anon) == 1 and anon[0]["id"] is None and anon[0]["name"] is None
    assert anon[0]["num_workers"] == 1  # capacity is still visible
    own = next(row for row in rows if row["id"] == mine)
    assert "another team's job" in own["pending_reason"]
    job = client.get(f"/v1/jobs/{mine}", headers=bearer(alice)).json()
    assert theirs not in job["pending_reason"]
    # bob sees his own job id in full.
    assert theirs in client.get("/v1/queue", headers=bearer(bob)).text
