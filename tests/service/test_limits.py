"""Bad input never becomes a 5xx and never writes: body size (413 before parsing, on
Content-Length and while streaming), NUL, surrogates, huge ints, NaN, deep nesting,
duplicate keys, wrong media type."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select
from svc_helpers import bearer, tiny_spec

from service.db.tables import Event, Job


@pytest.fixture
def small_app(make_settings: Any, launcher: Any) -> Any:
    from service.app import create_app

    return create_app(make_settings(max_body_bytes=4096), launcher=launcher)


@pytest.fixture
def small(small_app: Any) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    with TestClient(small_app) as c:
        yield c


def _nothing_written(app: Any) -> None:
    db = app.state.shunter.db
    for model in (Job, Event):
        assert (
            db.read(lambda s, m=model: s.execute(select(func.count()).select_from(m)).scalar_one())
            == 0
        )


def _token(app: Any) -> str:
    return str(app.state.shunter.settings.admin_token_path.read_text().strip())


def test_413_on_content_length_before_parsing(small: Any, small_app: Any) -> None:
    body = b"{" + b" " * 5000 + b"}"  # not even valid JSON: proves nothing parsed it
    r = small.post(
        "/v1/jobs",
        content=body,
        headers={**bearer(_token(small_app)), "Content-Type": "application/json"},
    )
    assert r.status_code == 413 and "limit" in r.json()["message"]
    _nothing_written(small_app)


def test_413_while_streaming_without_content_length(small: Any, small_app: Any) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"name": "'
        for _ in range(20):
            yield b"a" * 1000
        yield b'"}'

    r = small.post(
        "/v1/jobs",
        content=chunks(),
        headers={**bearer(_token(small_app)), "Content-Type": "application/json"},
    )
    assert r.status_code == 413
    _nothing_written(small_app)


def test_413_applies_to_internal_routes_too(small: Any, small_app: Any) -> None:
    big = {"points": [{"step": i, "name": "loss", "value": 1.0} for i in range(500)]}
    r = small.post("/v1/internal/jobs/job-x/attempts/1/metrics", json=big, headers=bearer("shn_x"))
    assert r.status_code == 413


BAD_BODIES = [
    ("nul", b'{"name": "a\x00b"}', 400),
    ("escaped-nul", b'{"name": "a\\u0000b"}', 400),
    ("surrogate", b'{"name": "\\ud800"}', 400),
    ("huge-int", b'{"max_restarts": ' + b"9" * 5000 + b"}", 400),
    ("nan", b'{"training": {"learning_rate": NaN}}', 400),
    ("infinity", b'{"training": {"learning_rate": Infinity}}', 400),
    ("overflow", b'{"training": {"learning_rate": 1e999}}', 400),
    ("deep", b'{"a": ' + b"[" * 2000 + b"]" * 2000 + b"}", 400),
    ("duplicate-keys", b'{"name": "a", "name": "b"}', 400),
    ("not-utf8", b'{"name": "\xff"}', 400),
    ("not-json", b"{name", 400),
    ("array", b"[1, 2]", 422),
    ("empty", b"", 400),
]


@pytest.mark.parametrize(("label", "body", "status"), BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_bodies_are_4xx_and_write_nothing(
    client: Any, app: Any, admin_token: str, label: str, body: bytes, status: int
) -> None:
    r = client.post(
        "/v1/jobs",
        content=body,
        headers={**bearer(admin_token), "Content-Type": "application/json"},
    )
    assert r.status_code == status, (label, r.status_code, r.text)
    assert r.json()["message"]
    _nothing_written(app)


def test_unsupported_media_type(client: Any, app: Any, admin_token: str) -> None:
    r = client.post(
        "/v1/jobs",
        content=b"<html/>",
        headers={**bearer(admin_token), "Content-Type": "text/html"},
    )
    assert r.status_code == 415
    _nothing_written(app)


def test_curl_default_form_type_is_read_as_json(client: Any, admin_token: str) -> None:
    """``curl -d @spec.json`` sends application/x-www-form-urlencoded (and drops newlines)."""
    import json

    body = json.dumps(tiny_spec(), indent=None).encode()
    r = client.post(
        "/v1/jobs",
        content=body,
        headers={**bearer(admin_token), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 201, r.text
    bad = client.post(
        "/v1/jobs",
        content=b"name=x",
        headers={**bearer(admin_token), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert bad.status_code == 400


def test_valid_spec_under_the_limit_still_passes(small: Any, small_app: Any) -> None:
    r = small.post("/v1/jobs", json=tiny_spec(), headers=bearer(_token(small_app)))
    assert r.status_code == 201, r.text
