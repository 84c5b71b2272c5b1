"""Client behaviour that needs no server: config lookup, error mapping, pagination, SSE decoding.

The fake server is ``httpx.MockTransport`` (a real transport, not a mock of the client).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import islice
from pathlib import Path

import httpx
import pytest

from shunter.client import (
    AuthError,
    Client,
    Conflict,
    ConnectionFailed,
    NotFound,
    PermissionDenied,
    ServerError,
    ValidationError,
    resolve_token,
    resolve_url,
)

Handler = Callable[[httpx.Request], httpx.Response]

JOB = {"id": "j1", "name": "a", "team": "t", "status": "queued", "attempt": 0, "spec": {}}


def client_for(handler: Handler) -> Client:
    return Client("http://api.test", "tok", transport=httpx.MockTransport(handler))


def test_url_and_token_resolution_order(tmp_path: Path) -> None:
    (tmp_path / "admin.token").write_text("from-file\n")
    env = {"SHUNTER_HOME": str(tmp_path)}
    assert resolve_token(None, env) == "from-file"
    assert resolve_token(None, {**env, "SHUNTER_TOKEN": "from-env"}) == "from-env"
    assert resolve_token("arg", {**env, "SHUNTER_TOKEN": "from-env"}) == "arg"
    assert resolve_token(None, {"SHUNTER_HOME": str(tmp_path / "nowhere")}) is None
    assert resolve_url(None, {}) == "http://127.0.0.1:8000"
    assert resolve_url(None, {"SHUNTER_URL": "http://h:1/"}) == "http://h:1"
    assert resolve_url("http://x:2", {"SHUNTER_URL": "http://h:1"}) == "http://x:2"


@pytest.mark.parametrize(
    ("status", "body", "cls", "message"),
    [
        (401, {"detail": "missing bearer token"}, AuthError, "missing bearer token"),
        (403, {"message": "viewers cannot submit"}, PermissionDenied, "viewers cannot submit"),
        (404, {"message": "job j9 not found", "detail": None}, NotFound, "job j9 not found"),
        (409, {"message": "job is succeeded"}, Conflict, "job is succeeded"),
        (500, "boom", ServerError, "boom"),
        (503, None, ServerError, "HTTP 503 Service Unavailable"),
    ],
)
def test_error_statuses_map_to_typed_exceptions(
    status: int, body: object, cls: type[Exception], message: str
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(status)
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    with client_for(handler) as c, pytest.raises(cls) as info:
        c.get("j9")
    assert info.value.message == message  # type: ignore[attr-defined]
    assert info.value.status_code == status  # type: ignore[attr-defined]


def test_validation_error_carries_detail() -> None:
    detail = [{"loc": "training.lr", "msg": "unknown field; did you mean 'learning_rate'?"}]
    body = {"detail": detail, "message": "training.lr: unknown field; did you mean ..."}
    with (
        client_for(lambda r: httpx.Response(422, json=body)) as c,
        pytest.raises(ValidationError) as info,
    ):
        c.submit({"name": "x"})
    assert info.value.detail == detail
    assert info.value.message.startswith("training.lr")


def test_submit_sends_yaml_file_token_and_idempotency_key(tmp_path: Path) -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json=JOB)

    spec = tmp_path / "s.yaml"
    spec.write_text("name: a\ntraining: {learning_rate: 5.0e-5}\n")
    with client_for(handler) as c:
        job = c.submit(spec, idempotency_key="k1")
    assert job.id == "j1" and job.status == "queued" and not job.terminal
    req = seen[0]
    assert req.headers["authorization"] == "Bearer tok"
    assert req.headers["idempotency-key"] == "k1"
    # A file goes as it is, for the server's parser; a mapping goes as JSON.
    assert req.headers["content-type"] == "application/yaml"
    assert req.content == spec.read_bytes()
    with client_for(handler) as c:
        c.submit({"name": "a", "training": {"learning_rate": float("nan")}})
    assert seen[1].headers["content-type"] == "application/json"
    assert seen[1].content == b'{"name": "a", "training": {"learning_rate": NaN}}'


def test_list_follows_cursors_lazily() -> None:
    calls: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        cursor = request.url.params.get("cursor")
        calls.append(cursor)
        n = int(cursor or 0)
        data = [{**JOB, "id": f"j{n + i}"} for i in range(2)]
        return httpx.Response(
            200, json={"data": data, "next_cursor": str(n + 2) if n < 4 else None}
        )

    with client_for(handler) as c:
        assert [j.id for j in islice(c.list(status="queued"), 3)] == ["j0", "j1", "j2"]
        assert calls == [None, "2"]  # the third page was never fetched
        calls.clear()
        assert len(list(c.list())) == 6
        assert calls == [None, "2", "4"]


def test_stream_metrics_decodes_events_and_stops_at_end() -> None:
    body = (
        ": keep-alive\n\n"
        'event: metric\ndata: {"step": 1, "name": "loss", "value": 0.9}\n\n'
        'event: status\ndata: {"status": "succeeded"}\n\n'
        "event: end\ndata: {}\n\n"
        'event: metric\ndata: {"step": 2, "name": "loss", "value": 0.1}\n\n'
    )

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/jobs/j1/metrics/stream"
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    with client_for(handler) as c:
        events = list(c.stream_metrics("j1"))
    assert [e.event for e in events] == ["metric", "status", "end"]
    assert events[0].point is not None and events[0].point.value == 0.9
    assert events[1].status == "succeeded"


def test_unreachable_server_is_connection_failed() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with client_for(handler) as c, pytest.raises(ConnectionFailed):
        c.queue()
