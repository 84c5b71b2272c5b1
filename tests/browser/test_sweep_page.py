"""The dashboard's sweep pages in headless Chromium: the sweeps list, a sweep's trials table
with the best trial marked, and the objective plotted against the trial number and against
each parameter, as trials report (driven as a Ray driver would, through the internal API).

Skipped like tests/browser/test_dashboard.py when Chromium or Playwright is missing.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from live_server import LiveServer, live_server, valid_spec

from shunter.client import Client

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
_IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
if not CHROMIUM.exists():
    _why = "needs Debian's chromium at /usr/bin/chromium (make setup-browser)"
    if _IN_CI:
        pytest.fail(f"CI is set: {_why}", pytrace=False)
    pytest.skip(_why, allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api")
sync_api.expect.set_options(timeout=30_000)
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(tmp_path_factory.mktemp("sweepweb")) as srv:
        yield srv


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"], headless=True
        )
        yield b
        b.close()


def _sweep_body() -> dict[str, Any]:
    base = valid_spec("web-sweep", eval_strategy="steps", eval_steps=1)
    base["data"]["eval"] = {"path": "train.tsv", "format": "csv", "delimiter": "\t"}
    return {
        "name": "web",
        "base": base,
        "space": {
            "training.learning_rate": {"type": "float", "low": 1e-5, "high": 1e-2, "log": True},
            "training.per_device_train_batch_size": {"type": "categorical", "choices": [8, 16]},
        },
        "objective": "eval_accuracy",
        "direction": "maximize",
        "max_trials": 4,
        "max_parallel": 4,
        "sampler": "random",
        "seed": 3,
    }


def test_sweep_page_plots_objective_vs_trial_and_parameters(
    server: LiveServer, browser: Any
) -> None:
    expect = sync_api.expect
    team = f"sw-{uuid.uuid4().hex[:6]}"
    token = server.member_token(team)
    with Client(server.url, token) as client:
        sweep = client.submit_sweep(_sweep_body())
        deadline = time.monotonic() + 30
        while len(client.sweep(sweep.id).trials) < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
        trials = client.sweep(sweep.id).trials
    assert len(trials) == 4
    for t in trials[:3]:  # three finish; the fourth keeps running
        d = server.driver(t.job_id)
        d.status("running")
        for step, acc in ((1, 0.5), (2, 0.55 + 0.1 * t.number)):
            d.metrics([{"step": step, "name": "eval_accuracy", "value": acc}], step=step, total=2)
        d.status("succeeded")
    page = browser.new_page()
    page.goto(server.url + "/")
    page.fill("#token-input", token)
    page.click("#signin-form button[type=submit]")
    page.get_by_role("link", name="Sweeps").click()
    row = page.locator(f"tr[data-sweep='{sweep.id}']")
    expect(row).to_contain_text("#2 0.75")
    row.get_by_role("link", name="web").click()
    expect(page.locator("#trials-table tbody tr")).to_have_count(4)
    expect(page.locator("#sweep-best")).to_contain_text("trial 2")
    expect(page.locator("tr.best")).to_have_attribute("data-trial", "2")
    expect(page.locator("#plot-trial")).to_have_attribute("data-points", "3")
    expect(page.locator("#plot-param-0")).to_have_attribute("data-points", "3")
    expect(page.locator("#plot-param-1")).to_have_attribute("data-points", "3")
    expect(page.locator("#plot-param-0 figcaption")).to_contain_text("training.learning_rate")
    expect(page.locator("#plot-trial canvas")).to_have_count(1)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "sweep-page.png"), full_page=True)
    page.click("#sweep-cancel")
    expect(page.locator("#sweep-status")).to_have_text("cancelled")
    # The cluster view shows the team's budget: used, limit and left this period.
    with Client(server.url, server.admin_token) as admin:
        admin.patch_team(team, budget={"cpu_hours": 5, "period": "week"})
    page.goto(f"{server.url}/#/cluster")
    row = page.locator("#teams-table tbody tr", has_text=team)
    expect(row).to_contain_text(re.compile(r"CPU-h 0\.\d\d / 5 \(left [45]\.\d\d\) per week"))
    page.close()
