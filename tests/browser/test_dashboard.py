"""The dashboard in headless Chromium (Debian's package, driven by Playwright's sync API).

A member signs in, sees a submitted job appear in the jobs table, opens its page and watches
the loss chart draw points and the logs tail fill while a real training run reports them, sees
a second job's expected start (ETA) in the queue, then cancels the first.

The "job" is real training without Ray: ``trainer_core.train`` runs in a thread on the job's
resolved spec (fetched from the internal API, as the Ray driver does) and a reporter posts
each step's metrics and each checkpoint to the internal API with the attempt token, and polls
the heartbeat for cancellation — the same calls ``worker/`` makes. So the curve in
``tests/artifacts/job-page.png`` is a genuine loss curve.

Skipped when ``/usr/bin/chromium`` or Playwright is missing (no browser is ever downloaded),
except under ``CI=true``, where that fails the run instead.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_server import CPUS, FakeDriver, LiveServer, live_server

from shunter.cli.example import default_model_dir
from shunter.client import Client

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
# In CI (CI=true, as every CI service sets it) a missing browser is a failure, never a skip:
# `make test` installs it (`make setup-browser`), so its absence means the setup broke.
_IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}
if not CHROMIUM.exists():
    _why = "needs Debian's chromium at /usr/bin/chromium (make setup-browser)"
    if _IN_CI:
        pytest.fail(f"CI is set: {_why}", pytrace=False)
    pytest.skip(_why, allow_module_level=True)
if _IN_CI:
    import playwright.sync_api as sync_api  # CI: an ImportError fails the run
else:
    sync_api = pytest.importorskip("playwright.sync_api")
# Generous waits (they cost time only on failure): the test machine's cores are shared.
sync_api.expect.set_options(timeout=30_000)

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
_POS = ["good", "great", "lovely", "fine", "superb", "wonderful", "excellent", "nice"]
_NEG = ["bad", "awful", "poor", "boring", "terrible", "dull", "weak", "ugly"]
_TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "vocab.txt",
                    "special_tokens_map.json", "config.json"]  # fmt: skip


def _write_sentiment_root(root: Path) -> None:
    """A toy sentiment task a tiny model learns in a few dozen steps, plus a real tokenizer."""
    rng = random.Random(0)
    for name, n in (("sent-train.tsv", 400), ("sent-eval.tsv", 48)):
        rows = ["sentence\tlabel"]
        for _ in range(n):
            label = rng.randint(0, 1)
            rows.append(f"{rng.choice(_POS if label else _NEG)}\t{label}")
        (root / name).write_text("\n".join(rows) + "\n")
    tok = root / "minilm-tokenizer"
    tok.mkdir(exist_ok=True)
    for f in _TOKENIZER_FILES:
        shutil.copy(Path(default_model_dir()) / f, tok / f)


def _spec(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": {
            "from_scratch": True,
            "task": "sequence-classification",
            "num_labels": 2,
            "tokenizer": "minilm-tokenizer",
            "config_overrides": {
                "model_type": "bert",
                "hidden_size": 32,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "intermediate_size": 64,
            },
        },
        "data": {
            "train": {"path": "sent-train.tsv", "format": "csv", "delimiter": "\t"},
            "eval": {"path": "sent-eval.tsv", "format": "csv", "delimiter": "\t"},
            "text_field": "sentence",
            "label_field": "label",
            "max_length": 4,
        },
        "training": {
            "max_steps": 300,  # cancelled long before; the progress bar shows a partial run
            "per_device_train_batch_size": 16,
            "learning_rate": 5.0e-3,
            "warmup_steps": 4,
            "logging_steps": 1,
            "eval_strategy": "steps",
            "eval_steps": 15,
            "save_steps": 15,
        },
        "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
    }


class _Cancelled(Exception):
    pass


class ApiReporter:
    """trainer_core Reporter that reports to the internal API like the Ray-side callback."""

    def __init__(self, driver: FakeDriver, total_steps: int) -> None:
        self.driver = driver
        self.total = total_steps
        self.log_offset = 0  # bytes of output shipped so far (the shipper's offset)

    def report(
        self, step: int, metrics: dict[str, float], checkpoint_dir: Path | None = None
    ) -> None:
        try:
            self._report(step, metrics, checkpoint_dir)
        except httpx.HTTPStatusError as e:
            # 409: this attempt is no longer the job's active one (here: cancelled and
            # already stopped); the real driver stops on it as well.
            if e.response.status_code == 409:
                raise _Cancelled from e
            raise

    def _report(self, step: int, metrics: dict[str, float], checkpoint_dir: Path | None) -> None:
        points = [
            {"step": step, "name": k, "value": float(v)}
            for k, v in metrics.items()
            if isinstance(v, int | float) and k != "epoch"
        ]
        progress = {"step": step, "total_steps": self.total, "epoch": metrics.get("epoch")}
        self.driver._post("/metrics", {"points": points, "progress": progress})
        if "loss" in metrics:  # the output a worker prints, shipped as the log shipper does
            line = f"step {step}: loss {metrics['loss']:.4f}\n".encode()
            shipped = self.driver._http.post(
                "/logs", params={"offset": self.log_offset}, content=line
            )
            shipped.raise_for_status()
            self.log_offset = shipped.json()["next_offset"]
        if checkpoint_dir is not None:
            size = sum(f.stat().st_size for f in Path(checkpoint_dir).rglob("*") if f.is_file())
            self.driver._post(
                "/checkpoints",
                {
                    "step": step,
                    "uri": Path(checkpoint_dir).as_uri(),
                    "bytes": size,
                    "metrics": {},
                    "verified": True,
                },
            )
        beat = self.driver._post("/heartbeat", {})
        if beat["cancel_requested"]:
            raise _Cancelled  # the real driver stops its trainer here too

    def latest_checkpoint(self) -> Path | None:
        return None

    def stop_requested(self) -> str | None:
        return None  # cancellation arrives on the heartbeat above; nothing pauses this job

    def checkpoint_files(self, directory: Path) -> None:
        return None  # every checkpoint is on local disk


def _train_in_thread(driver: FakeDriver, errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            from trainer_core import TrainConfig, train  # already imported by the fixture

            got = driver._http.get("/spec")
            got.raise_for_status()
            body = got.json()
            spec = body["spec"]
            spec["training"]["output_dir"] = body["output_dir"]
            driver.status("running")
            train(TrainConfig.from_spec(spec), ApiReporter(driver, spec["training"]["max_steps"]))
            driver.status("succeeded")
        except _Cancelled:
            pass
        except BaseException as e:  # surfaced by the test
            errors.append(e)

    thread = threading.Thread(target=run, name="fake-worker", daemon=True)
    thread.start()
    return thread


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    with live_server(tmp_path_factory.mktemp("web"), data_setup=_write_sentiment_root) as srv:
        yield srv


@pytest.fixture(scope="module")
def trainer() -> Any:
    """Import torch/transformers before the clock of the browser waits starts (10-60 s)."""
    import trainer_core.loop

    return trainer_core.loop


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _points(page: Any, chart: str) -> int:
    return int(page.get_attribute(f"#{chart}", "data-points") or 0)


def _sign_in(page: Any, url: str, token: str) -> None:
    page.goto(url + "/")
    page.fill("#token-input", token)
    page.click("#signin-form button[type=submit]")


def test_dashboard_live_job_page_and_cancel(server: LiveServer, browser: Any, trainer: Any) -> None:
    expect = sync_api.expect
    team = f"web-{uuid.uuid4().hex[:6]}"
    with server.client() as admin:  # one running job at a time: a second one must queue
        admin.create_team(team, quota={"max_running_jobs": 1})
        token = admin.create_token(team=team, role="member", name=f"{team}-member").token
    # bypass_csp: Playwright's wait_for_function evaluates its predicate with eval, which the
    # server's CSP (script-src 'self', tests/security) rightly refuses.
    page = browser.new_page(viewport={"width": 1400, "height": 1300}, bypass_csp=True)
    page.set_default_timeout(60_000)
    page.on("dialog", lambda d: d.accept())  # the cancel confirmation

    # Sign in: whoami shows team and role; a bad token is refused.
    page.goto(server.url + "/")
    page.fill("#token-input", "wrong")
    page.click("#signin-form button[type=submit]")
    expect(page.locator("#signin-error")).to_contain_text("not accepted")
    _sign_in(page, server.url, token)
    expect(page.locator("#who-role")).to_have_text("member")
    expect(page.locator("#who-team")).to_have_text(team)
    expect(page.locator("#cluster-cpus")).to_have_text(f"{CPUS} / {CPUS}")

    # A submitted job appears in the jobs table (auto-refresh), and links to its page.
    with Client(server.url, token) as client:
        job = client.submit(_spec("web-sst"))
    row = page.locator(f"tr[data-job='{job.id}']")
    expect(row).to_be_visible(timeout=60_000)
    row.get_by_role("link", name="web-sst").click()
    expect(page).to_have_url(f"{server.url}/#/jobs/{job.id}")

    # Real training reports; the loss chart draws points live (no reload).
    errors: list[BaseException] = []
    worker = _train_in_thread(server.driver(job.id), errors)
    expect(page.locator("#job-status")).to_have_text("running", timeout=60_000)
    try:
        page.wait_for_function(
            "document.querySelector('#chart-loss').dataset.points >= 5", timeout=180_000
        )
    except sync_api.TimeoutError:
        assert not errors, errors  # the training thread's error says more than the timeout
        raise
    first = _points(page, "chart-loss")
    page.wait_for_function(
        f"document.querySelector('#chart-loss').dataset.points >= {first + 25}", timeout=300_000
    )
    page.wait_for_function(
        "document.querySelector('#chart-eval').dataset.points >= 2", timeout=60_000
    )
    assert not errors, errors
    assert _points(page, "chart-lr") > 0
    expect(page.locator("#checkpoints tr").first).to_contain_text("yes", timeout=30_000)
    expect(page.locator("#events")).to_contain_text("running")
    # The logs tail shows the worker's output as it is shipped (no reload).
    expect(page.locator("#logs")).to_contain_text(re.compile(r"step \d+: loss \d"), timeout=60_000)
    expect(page.locator("#cancel")).to_be_visible()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "job-page.png"), full_page=True)

    # The chart holds what the API holds: every loss point, drawn.
    with Client(server.url, token) as client:
        api_losses = [p for p in client.metrics(job.id, name="loss")]
    assert _points(page, "chart-loss") >= min(len(api_losses), first + 25)

    # A viewer of the same team sees the job but gets no cancel button.
    with server.client() as admin:
        viewer = admin.create_token(team=team, role="viewer", name="web-viewer").token
    other = browser.new_page(bypass_csp=True)
    _sign_in(other, server.url, viewer)
    expect(other.locator("#who-role")).to_have_text("viewer")
    other.goto(f"{server.url}/#/jobs/{job.id}")
    expect(other.locator("#job-status")).to_have_text("running")
    expect(other.locator("#cancel")).to_have_count(0)
    other.close()

    # A second job waits for the team's quota: the queue shows it with the reason, and the
    # status filter narrows the jobs table to it.
    with Client(server.url, token) as client:
        waiting = client.submit(_spec("web-waiting"))
    page.get_by_role("link", name="← All jobs").click()
    queue_row = page.locator("#queue-table tbody tr", has_text="web-waiting")
    expect(queue_row).to_contain_text("team quota: 1/1 jobs running", timeout=60_000)
    page.select_option("#status-filter", "queued")
    expect(page.locator("#jobs-table tbody tr")).to_have_count(1)
    expect(page.locator(f"tr[data-job='{waiting.id}']")).to_be_visible()
    page.select_option("#status-filter", "")
    # Its ETA: the scheduler runs its policy forward from the running job's step rate.
    page.goto(f"{server.url}/#/cluster")
    eta_row = page.locator("#cluster-queue-table tbody tr", has_text="web-waiting")
    expect(eta_row).to_contain_text(re.compile(r"in \d+ min|in \d+\.\d h|now"), timeout=60_000)
    # Fair share's owed account per team, in cluster-hours (signed).
    team_row = page.locator("#teams-table tbody tr", has_text=team)
    expect(team_row.locator("td").last).to_have_text(re.compile(r"^-?\d+\.\d\d$"))
    page.goto(f"{server.url}/#/jobs/{job.id}")
    expect(page.locator("#cancel")).to_be_visible()

    # Cancel from the page; the worker sees it on its next heartbeat and stops.
    page.click("#cancel")
    expect(page.locator("#job-status")).to_have_text("cancelled", timeout=60_000)
    worker.join(120)
    assert not worker.is_alive() and not errors, errors
    expect(page.locator("#cancel")).to_have_count(0)
    expect(page.locator("#events")).to_contain_text("cancelled", timeout=30_000)

    # A revoked token signs the page out, with the reason, at its next background refresh.
    with server.client() as admin:
        admin.revoke_token(next(t.id for t in admin.tokens() if t.name == f"{team}-member"))
    expect(page.locator("#signin-error")).to_contain_text("401")
    expect(page.locator("#app")).to_be_hidden()
    page.close()
