"""The dashboard's webhooks page in headless Chromium: the team's endpoint, its deliveries
(a job's ``job.succeeded`` delivered to a real receiver on 127.0.0.1), and the Re-send button,
which sends the same ``webhook-id`` again.

Skipped like tests/browser/test_dashboard.py when Chromium or Playwright is missing.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_server import LiveServer, live_server, valid_spec

from shunter.client import Client

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service" / "webhooks"))
from receiver import Receiver

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
if not CHROMIUM.exists():
    pytest.skip("needs Debian's chromium at /usr/bin/chromium", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
sync_api.expect.set_options(timeout=30_000)
_ENV = {"SHUNTER_WEBHOOK_ALLOW": "127.0.0.1", "SHUNTER_WEBHOOK_INTERVAL_S": "0.05"}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)
    try:
        with live_server(tmp_path_factory.mktemp("hookweb")) as srv:
            yield srv
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"], headless=True
        )
        yield b
        b.close()


def test_webhooks_page_lists_deliveries_and_resends(server: LiveServer, browser: Any) -> None:
    expect = sync_api.expect
    receiver = Receiver().start()
    try:
        token = server.member_token(f"wh-{uuid.uuid4().hex[:6]}")
        with Client(server.url, token) as client:
            ep = client.create_webhook(receiver.url, events=["job.succeeded"])
            job = client.submit(valid_spec("hooked-web"))
        driver = server.driver(job.id)
        driver.status("running")
        driver.status("succeeded")
        deadline = time.monotonic() + 30
        while not receiver.messages() and time.monotonic() < deadline:
            time.sleep(0.05)
        msg_id = receiver.messages()[0][0]["webhook-id"]
        page = browser.new_page()
        page.goto(server.url + "/")
        page.fill("#token-input", token)
        page.click("#signin-form button[type=submit]")
        page.get_by_role("link", name="Webhooks").click()
        expect(page.locator(f"tr[data-endpoint='{ep.id}']")).to_contain_text("enabled")
        row = page.locator(f"tr[data-delivery='{msg_id}']")
        expect(row).to_contain_text("delivered")
        expect(row).to_contain_text("job.succeeded")
        row.get_by_role("button", name="Re-send").click()
        deadline = time.monotonic() + 30
        while len(receiver.messages()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [h["webhook-id"] for h, _ in receiver.messages()] == [msg_id, msg_id]
        page.close()
    finally:
        receiver.stop()
