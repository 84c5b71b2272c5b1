"""Safe defaults from outside: security headers on every response, /docs from local assets,
SHUNTER_HOME 0700 and the database 0600, a rate limit on mutating calls, and ``db downgrade``
needing an explicit revision. (On main 187a972: no headers, /docs loaded CDN scripts, home
0755 and database 0644, no rate limit, and ``db downgrade`` alone dropped every table.)"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sec_helpers import bearer, tiny_spec
from typer.testing import CliRunner

from service.app import create_app


@pytest.mark.parametrize(
    "path", ["/v1/whoami", "/v1/jobs/job-nope", "/healthz", "/", "/docs", "/js/app.js", "/nope"]
)
def test_every_response_carries_csp_and_nosniff(path: str, client: Any, admin_token: str) -> None:
    r = client.get(path, headers=bearer(admin_token))
    csp = r.headers.get("content-security-policy", "")
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, (path, r.headers)
    assert (
        "script-src 'self'" in csp
        and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]
    )
    assert r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["x-frame-options"] == "DENY"
    assert r.headers["referrer-policy"] == "no-referrer"


def test_docs_load_only_local_assets(client: Any) -> None:
    page = client.get("/docs").text
    sources = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert sources and all(s.startswith("/") and not s.startswith("//") for s in sources), sources
    assert "<script>" not in page  # no inline script: the CSP forbids it
    for src in sources:
        assert client.get(src).status_code == 200, src
    assert client.get("/redoc").status_code != 200 or "cdn" not in client.get("/redoc").text


def test_home_is_0700_and_database_0600(tmp_path: Path, make_settings: Any) -> None:
    home = tmp_path / "fresh-home"
    settings = make_settings(
        home=home, database_url=f"sqlite:///{home / 'shunter.db'}", migrate_on_start=True
    )
    create_app(settings, launcher=None)
    assert os.stat(home).st_mode & 0o777 == 0o700
    assert os.stat(home / "shunter.db").st_mode & 0o777 == 0o600
    assert os.stat(settings.storage).st_mode & 0o777 == 0o700
    assert os.stat(home / "admin.token").st_mode & 0o777 == 0o600


def test_mutating_calls_are_rate_limited_per_token(
    make_settings: Any, launcher: Any, make_token: Any, admin_token: str
) -> None:
    app = create_app(make_settings(rate_limit_per_minute=6, rate_limit_burst=3), launcher=launcher)
    with TestClient(app) as limited:
        token = limited.post(
            "/v1/tokens", json={"team": "default", "role": "member", "name": "rl"},
            headers=bearer(admin_token),
        ).json()["token"]  # fmt: skip
        codes = [
            limited.post("/v1/jobs", json=tiny_spec(), headers=bearer(token)).status_code
            for _ in range(4)
        ]
        assert codes[:3] == [201, 201, 201] and codes[3] == 429, codes
        r = limited.post("/v1/jobs", json=tiny_spec(), headers=bearer(token))
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert r.headers["content-security-policy"]
        # Reads are not limited, and another token has its own bucket.
        assert limited.get("/v1/jobs", headers=bearer(token)).status_code == 200
        other = limited.post("/v1/jobs", json=tiny_spec(), headers=bearer(admin_token))
        assert other.status_code == 201


def test_db_downgrade_needs_an_explicit_revision() -> None:
    import typer

    from service.cli import register

    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["db", "downgrade"])
    assert result.exit_code == 2 and "missing argument" in result.output.lower()
