"""Idempotency-Key on POST /v1/jobs: replay, mismatch, per team, concurrent retries."""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import func, select
from svc_helpers import bearer, tiny_spec

from service.db.tables import IdempotencyKey, Job


def _jobs(db: Any) -> int:
    return int(db.read(lambda s: s.execute(select(func.count()).select_from(Job)).scalar_one()))


def test_same_key_same_body_replays(client: Any, admin_token: str, db: Any) -> None:
    h = {**bearer(admin_token), "Idempotency-Key": "k1"}
    first = client.post("/v1/jobs", json=tiny_spec(), headers=h)
    second = client.post("/v1/jobs", json=tiny_spec(), headers=h)
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    # Key order and whitespace do not change the body's identity.
    reordered = dict(reversed(list(tiny_spec().items())))
    third = client.post("/v1/jobs", json=reordered, headers=h)
    assert third.status_code == 200 and third.json()["id"] == first.json()["id"]
    assert _jobs(db) == 1


def test_same_key_other_body_422(client: Any, admin_token: str, db: Any) -> None:
    h = {**bearer(admin_token), "Idempotency-Key": "k1"}
    assert client.post("/v1/jobs", json=tiny_spec("a"), headers=h).status_code == 201
    r = client.post("/v1/jobs", json=tiny_spec("b"), headers=h)
    assert r.status_code == 422 and "Idempotency-Key" in r.json()["message"]
    assert _jobs(db) == 1


def test_keys_are_per_team(client: Any, make_token: Any, db: Any) -> None:
    a, b = make_token("alpha"), make_token("beta")
    ra = client.post("/v1/jobs", json=tiny_spec(), headers={**bearer(a), "Idempotency-Key": "k"})
    rb = client.post("/v1/jobs", json=tiny_spec(), headers={**bearer(b), "Idempotency-Key": "k"})
    assert ra.status_code == rb.status_code == 201
    assert ra.json()["id"] != rb.json()["id"] and _jobs(db) == 2


def test_concurrent_retries_make_one_job(app: Any, admin_token: str, db: Any) -> None:
    from service.accounts.auth import Principal, Role
    from service.jobs.submit import SubmitContext, submit_job

    st = app.state.shunter
    principal = Principal(token_id="t", team="default", role=Role.ADMIN, name="admin")
    raw = __import__("json").dumps(tiny_spec()).encode()
    cluster = st.launcher.cluster()
    n = 10
    barrier = threading.Barrier(n)
    results: list[Any] = []
    errors: list[BaseException] = []

    def retry() -> None:
        barrier.wait()
        try:
            results.append(
                submit_job(
                    st.db,
                    principal=principal,
                    raw=raw,
                    content_type="application/json",
                    idempotency_key="same",
                    ctx=SubmitContext(
                        data_roots=st.settings.data_roots,
                        storage=st.settings.storage,
                        cluster=cluster,
                    ),
                )
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=retry) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len({r.job.id for r in results}) == 1 and len(results) == n
    assert sum(r.created for r in results) == 1
    assert _jobs(db) == 1
    keys = db.read(
        lambda s: s.execute(select(func.count()).select_from(IdempotencyKey)).scalar_one()
    )
    assert keys == 1


def test_bad_key_header_is_400(client: Any, admin_token: str) -> None:
    r = client.post(
        "/v1/jobs", json=tiny_spec(), headers={**bearer(admin_token), "Idempotency-Key": "x" * 300}
    )
    assert r.status_code == 400
