"""Bounded streams and a careful client: SSE streams are capped per token and re-check the
token, so a revoked one is closed within a minute; the CLI never sends the local admin token
to another host and never follows a redirect with a token; path errors do not reveal what
exists outside the data roots. (On main 187a972: unlimited streams that outlived a revoke,
admin.token sent to any SHUNTER_URL, and errors naming resolved paths outside the roots.)"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sec_helpers import bearer, submit, tiny_spec

from service.app import create_app
from shunter.client import Client
from shunter.client.config import resolve_token


def test_streams_are_capped_per_token_and_end_when_it_is_revoked(
    make_settings: Any, launcher: Any, admin_token: str
) -> None:
    settings = make_settings(sse_max_streams_per_token=1, sse_token_recheck_seconds=0.3)
    with TestClient(create_app(settings, launcher=launcher)) as c:
        made = c.post(
            "/v1/tokens", json={"team": "default", "role": "member", "name": "sse"},
            headers=bearer(admin_token),
        ).json()  # fmt: skip
        token = made["token"]
        job_id = submit(c, token, tiny_spec())["id"]  # stays queued: the stream never ends
        url = f"/v1/jobs/{job_id}/metrics/stream"
        second: dict[str, Any] = {}

        def meanwhile() -> None:
            time.sleep(0.5)
            r = c.get(url, headers=bearer(token))
            second.update(status=r.status_code, retry=r.headers.get("retry-after"))
            c.delete(f"/v1/tokens/{made['id']}", headers=bearer(admin_token))

        th = threading.Thread(target=meanwhile)
        started = time.monotonic()
        th.start()
        with c.stream("GET", url, headers=bearer(token)) as r:
            assert r.status_code == 200
            text = "".join(r.iter_text())
        th.join()
    assert second == {"status": 429, "retry": "5"}
    last = [b for b in text.strip().split("\n\n") if b.startswith("event:")][-1]
    assert last.startswith("event: error") and json.loads(last.split("data: ")[1]) == {
        "message": "token revoked"
    }
    assert time.monotonic() - started < 10


def test_local_admin_token_is_never_sent_to_another_host(tmp_path: Path) -> None:
    (tmp_path / "admin.token").write_text("shn_local_admin")
    env = {"SHUNTER_HOME": str(tmp_path)}
    assert resolve_token(None, env, url="http://127.0.0.1:8000") == "shn_local_admin"
    assert resolve_token(None, env, url="http://localhost:9") == "shn_local_admin"
    assert resolve_token(None, env, url="http://[::1]:8000") == "shn_local_admin"
    assert resolve_token(None, env, url="https://shunter.example.com") is None
    assert resolve_token(None, {**env, "SHUNTER_URL": "http://10.0.0.5:8000"}) is None
    told = {**env, "SHUNTER_SEND_LOCAL_ADMIN_TOKEN": "1"}
    assert resolve_token(None, told, url="https://shunter.example.com") == "shn_local_admin"
    # An explicit token is the user's choice for the URL they configured.
    assert resolve_token("shn_given", env, url="https://shunter.example.com") == "shn_given"


def test_client_never_follows_a_redirect_with_its_token() -> None:
    seen: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.headers.get("authorization")))
        return httpx.Response(307, headers={"location": "https://evil.example/v1/whoami"})

    client = Client(
        "https://shunter.example.com", token="shn_t", transport=httpx.MockTransport(handler)
    )
    with pytest.raises(Exception):  # noqa: B017 - any client error; the point is what was sent
        client.whoami()
    assert seen == [("shunter.example.com", "Bearer shn_t")]
    assert client._http.timeout.read is not None  # every call has a timeout


def test_path_errors_do_not_reveal_what_exists_outside_the_roots(
    client: Any, admin_token: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside-secret.csv"
    outside.write_text("sentence,label\nx,1\n")
    messages = []
    for path in (str(outside), str(tmp_path / "no-such-file.csv")):
        spec = tiny_spec(data={"train": {"path": path, "format": "csv"}})
        r = client.post("/v1/jobs", json=spec, headers=bearer(admin_token))
        assert r.status_code == 422
        (detail,) = [d for d in r.json()["detail"] if d["loc"] == "data.train.path"]
        messages.append(detail["msg"].replace(path, "<path>"))
    assert messages[0] == messages[1]  # existing and missing answer alike
