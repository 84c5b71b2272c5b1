"""Fuzz the internal endpoints with arbitrary JSON: never a 5xx, and a 4xx writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select
from svc_helpers import bearer, claim, internal, tiny_spec

from service.app import create_app
from service.db.tables import Checkpoint, Event, MetricPoint
from service.launch import InMemoryLauncher
from service.settings import Settings

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
POINT = st.fixed_dictionaries(
    {
        "step": st.integers(min_value=-5, max_value=2**64),
        "name": st.text(max_size=140),
        "value": st.floats(allow_nan=False) | st.text(max_size=3),
    },
    optional={"time": st.text(max_size=30) | st.just("2026-01-01T00:00:00Z")},
)
BODIES = st.one_of(
    JSONISH,
    st.fixed_dictionaries({"points": st.lists(POINT, max_size=5)}, optional={"progress": JSONISH}),
    st.fixed_dictionaries(
        {"status": st.sampled_from(["running", "succeeded", "failed", "x"])},
        optional={"error": JSONISH, "final_model_uri": JSONISH},
    ),
    st.fixed_dictionaries(
        {"step": JSONISH, "uri": JSONISH, "bytes": JSONISH},
        optional={"metrics": JSONISH, "verified": JSONISH},
    ),
)


class _Target:
    """The job and attempt under fuzz; a fresh one once a fuzzed report ended the last."""

    def __init__(self, client: Any, admin: str) -> None:
        self.client, self.admin = client, admin
        self.job_id, self.number, self.token = "", 0, ""
        self.renew()

    def renew(self) -> None:
        r = self.client.post("/v1/jobs", json=tiny_spec(), headers=bearer(self.admin))
        self.job_id = r.json()["id"]
        self.number, self.token = claim(self.client.app.state.shunter.db, self.job_id)

    def ensure_active(self) -> None:
        r = self.client.get(f"/v1/jobs/{self.job_id}", headers=bearer(self.admin))
        if r.json()["status"] not in ("starting", "running"):
            self.renew()


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[_Target]:
    home = tmp_path_factory.mktemp("fuzz-internal") / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "train.tsv").write_text("sentence\tlabel\na\t1\n")
    settings_ = Settings(
        home=home, data_roots=[home / "data"], launcher="memory", run_scheduler=False
    )
    app = create_app(settings_, launcher=InMemoryLauncher())
    with TestClient(app) as client:
        yield _Target(client, (home / "admin.token").read_text().strip())


def _counts(client: Any) -> tuple[int, ...]:
    db = client.app.state.shunter.db
    return tuple(
        db.read(lambda s, m=m: s.execute(select(func.count()).select_from(m)).scalar_one())
        for m in (MetricPoint, Checkpoint, Event)
    )


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(what=st.sampled_from(["metrics", "status", "checkpoints", "heartbeat"]), body=BODIES)
def test_internal_endpoints_never_5xx(target: _Target, what: str, body: Any) -> None:
    target.ensure_active()
    before = _counts(target.client)
    r = target.client.post(
        internal(target.job_id, target.number, what),
        content=json.dumps(body),
        headers={**bearer(target.token), "Content-Type": "application/json"},
    )
    assert r.status_code < 500, r.text
    if r.status_code >= 400:
        assert r.json()["message"]
        assert _counts(target.client) == before
