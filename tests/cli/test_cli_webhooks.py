"""``shunter webhooks create|list|deliveries|resend|rotate|disable|enable|delete`` against a
live server (in-memory launcher) and a real receiver on 127.0.0.1 (admin-allowed)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from live_server import LiveServer, live_server, valid_spec
from typer.testing import CliRunner, Result

from shunter.cli import app
from shunter.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service" / "webhooks"))
from receiver import Receiver

_ENV = {
    "SHUNTER_WEBHOOK_ALLOW": "127.0.0.1",
    "SHUNTER_WEBHOOK_INTERVAL_S": "0.05",
    "SHUNTER_WEBHOOK_RETRY_DELAYS_S": "0.2,0.2,0.2",
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)
    try:
        with live_server(tmp_path_factory.mktemp("live")) as server:
            yield server
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver().start()
    yield r
    r.stop()


def run(live: LiveServer, *args: str) -> Result:
    argv = [*args, "--url", live.url, "--token", live.admin_token]
    return CliRunner(env={"COLUMNS": "240"}).invoke(app, argv)


def wait_until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.05)


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_private_url_refused_names_url(live: LiveServer) -> None:
    result = run(live, "webhooks", "create", "http://10.1.2.3/hook")
    assert result.exit_code == 2, result.output
    assert "url" in result.output and "SHUNTER_WEBHOOK_ALLOW" in result.output


def test_create_deliver_list_resend_rotate(live: LiveServer, receiver: Receiver) -> None:
    result = run(live, "webhooks", "create", receiver.url, "--event", "job.succeeded")
    assert result.exit_code == 0, result.output
    assert "secret (shown once): whsec_" in result.output
    ep = as_json(run(live, "webhooks", "list", "--json"))
    ep = next(e for e in ep if e["url"] == receiver.url)
    assert ep["events"] == ["job.succeeded"] and not ep.get("secret")
    job = Client(live.url, token=live.admin_token).submit(valid_spec("hooked"))
    driver = live.driver(job.id)
    driver.status("running")
    driver.status("succeeded")
    wait_until(lambda: len(receiver.messages()) == 1)
    rows = as_json(run(live, "webhooks", "deliveries", "--job", job.id, "--json"))
    assert [(d["type"], d["status"]) for d in rows] == [("job.succeeded", "delivered")]
    table = run(live, "webhooks", "deliveries", "--job", job.id)
    assert rows[0]["id"] in table.output and "delivered" in table.output
    assert run(live, "webhooks", "resend", rows[0]["id"]).exit_code == 0
    wait_until(lambda: len(receiver.messages()) == 2)
    first, again = receiver.messages()
    assert first[0]["webhook-id"] == again[0]["webhook-id"] == rows[0]["id"]
    rotated = run(live, "webhooks", "rotate", ep["id"])
    assert rotated.exit_code == 0 and "whsec_" in rotated.output
    disabled = run(live, "webhooks", "disable", ep["id"])
    assert "DISABLED" in disabled.output
    assert run(live, "webhooks", "resend", rows[0]["id"]).exit_code != 0  # 409 while disabled
    assert "enabled" in run(live, "webhooks", "enable", ep["id"]).output
    assert run(live, "webhooks", "delete", ep["id"]).exit_code == 0
    assert all(e["id"] != ep["id"] for e in as_json(run(live, "webhooks", "list", "--json")))
