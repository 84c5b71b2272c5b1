"""``GET /v1/jobs/{id}`` for pollers (service/http/job_poll.py): the lean path answers a cached
token's plain poll with exactly the route's body and headers; everything else (errors, query
strings, a token not yet cached) is the route's answer."""

from __future__ import annotations

from typing import Any

import pytest
from svc_helpers import bearer, submit

from service.http import job_poll


@pytest.fixture
def answered(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether the lean path answered each GET it was offered."""
    seen: list[bool] = []
    original = job_poll.JobPollMiddleware._answer

    async def spy(self: Any, scope: Any, send: Any, job_id: str) -> bool:
        result = await original(self, scope, send, job_id)
        seen.append(result)
        return result

    monkeypatch.setattr(job_poll.JobPollMiddleware, "_answer", spy)
    return seen


def test_a_poll_gets_the_routes_body_and_headers(
    client: Any, admin_token: str, answered: list[bool]
) -> None:
    job_id = submit(client, admin_token)["id"]  # caches the token
    lean = client.get(f"/v1/jobs/{job_id}", headers=bearer(admin_token))
    assert answered == [True]
    routed = client.get(f"/v1/jobs/{job_id}?via=route", headers=bearer(admin_token))
    assert answered == [True]  # a query string is not offered to the lean path
    assert lean.status_code == routed.status_code == 200
    assert lean.json() == routed.json()
    assert lean.json()["id"] == job_id and lean.json()["status"] == "queued"
    for name in ("content-type", "content-security-policy", "x-content-type-options"):
        assert lean.headers[name] == routed.headers[name], name
    metrics = client.get("/metrics").text
    assert 'route="/v1/jobs/{job_id}"' in metrics and 'route="unmatched"' not in metrics


def test_errors_and_uncached_tokens_are_the_routes(
    client: Any, admin_token: str, make_token: Any, answered: list[bool]
) -> None:
    job_id = submit(client, admin_token)["id"]
    theirs = make_token("other")
    r = client.get(f"/v1/jobs/{job_id}", headers=bearer(theirs))
    assert r.status_code == 404 and job_id in r.json()["message"]
    r = client.get(f"/v1/jobs/{job_id}", headers=bearer(theirs))  # cached now: still 404
    assert r.status_code == 404 and job_id in r.json()["message"]
    assert answered[-1] is False
    missing = client.get("/v1/jobs/job-nope", headers=bearer(admin_token))
    assert missing.status_code == 404 and answered[-1] is False
    assert client.get(f"/v1/jobs/{job_id}").status_code == 401
    assert client.get(f"/v1/jobs/{job_id}", headers=bearer("shn_" + "x" * 40)).status_code == 401
    assert answered[-1] is False
