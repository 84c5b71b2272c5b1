"""Webhook delivery benchmark: latency from a job's event to a real receiver, and how fast a
backlog drains (receiver down, then up), on SQLite or PostgreSQL.

    python bench/webhooks.py [--db sqlite|postgres] [--jobs 50] [--backlog 200]
                             [--interval 1.0] [--pg-url URL]

The service runs in process (``create_app``, in-memory launcher, no scheduler) with its own
delivery thread at ``--interval`` seconds (the default setting is 1.0); the receiver is an
HTTP server on 127.0.0.1 (admin-allowed). Latency: ``--jobs`` jobs cancelled one after
another through the API, each timed from the cancel's answer to the receiver's read of its
``job.cancelled``. Drain: ``--backlog`` jobs cancelled while the receiver is down (each
attempted once and left pending), then the receiver comes back and every pending delivery
is made due; reported is deliveries per second until the last arrives. Every ``webhook-id``
must arrive exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SHUNTER_RATE_LIMIT_PER_MINUTE", "0")


class Receiver:
    """Records (arrival time, webhook-id, job id) of every POST; ``port`` fixed once bound."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.got: list[tuple[float, str, str]] = []
        self._server: ThreadingHTTPServer | None = None

    def start(self) -> Receiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                job = json.loads(body)["data"]["id"]
                owner.got.append((time.monotonic(), self.headers["webhook-id"], job))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _wait(cond: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > end:
            raise SystemExit("timed out waiting for deliveries")
        time.sleep(0.005)


def _spec(data: Path) -> dict[str, Any]:
    return {
        "name": "hook",
        "model": {"name_or_path": "tiny", "task": "sequence-classification", "num_labels": 2},
        "data": {
            "train": {"path": str(data / "train.tsv"), "format": "csv", "delimiter": "\t"},
            "text_field": "sentence",
            "label_field": "label",
        },
        "training": {"max_steps": 1},
        "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from fastapi.testclient import TestClient
    from sqlalchemy import update

    from service.app import create_app
    from service.db.migrate import upgrade
    from service.db.tables import WebhookDelivery
    from service.settings import Settings

    home = Path(tempfile.mkdtemp(prefix="bench-webhooks-"))
    (home / "data").mkdir()
    (home / "data" / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    (home / "data" / "tiny").mkdir()
    (home / "data" / "tiny" / "config.json").write_text('{"model_type": "bert"}')
    url = f"sqlite:///{home / 'shunter.db'}"
    if args.db == "postgres":
        url = _pg_database(args.pg_url)
    upgrade(url)
    settings = Settings(
        home=home, database_url=url, launcher="memory", run_scheduler=False,
        migrate_on_start=False, webhook_allow=["127.0.0.1"],
        webhook_interval_s=args.interval, data_roots=[home / "data"],
    )  # fmt: skip
    receiver = Receiver().start()
    app = create_app(settings)
    with TestClient(app) as client:
        auth = {"Authorization": "Bearer " + settings.admin_token_path.read_text().strip()}
        r = client.post(
            "/v1/webhooks/endpoints",
            json={"url": f"http://127.0.0.1:{receiver.port}/h"},
            headers=auth,
        )
        assert r.status_code == 201, r.text

        def job() -> str:
            r = client.post("/v1/jobs", json=_spec(home / "data"), headers=auth)
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        # Latency, one event at a time.
        sent: dict[str, float] = {}
        for _ in range(args.jobs):
            job_id = job()
            client.post(f"/v1/jobs/{job_id}/cancel", headers=auth)
            sent[job_id] = time.monotonic()
            _wait(lambda n=len(sent): len(receiver.got) >= n, 60)
        lat = sorted((t - sent[j]) * 1000 for t, _, j in receiver.got)
        # Drain: a backlog queued while the receiver is down.
        receiver.stop()
        port = receiver.port
        backlog = [job() for _ in range(args.backlog)]
        for job_id in backlog:
            client.post(f"/v1/jobs/{job_id}/cancel", headers=auth)
        time.sleep(args.interval * 2 + 1)
        receiver = Receiver(port).start()
        db = app.state.shunter.db
        start = time.monotonic()
        db.write(
            lambda s: s.execute(
                update(WebhookDelivery).values(next_attempt_at=WebhookDelivery.created_at)
            )
        )
        _wait(lambda: len(receiver.got) >= args.backlog, 600)
        drain_s = max(t for t, _, _ in receiver.got) - start
        ids = [m for _, m, _ in receiver.got]
        assert len(ids) == len(set(ids)) == args.backlog, "a webhook-id arrived twice"
    receiver.stop()
    shutil.rmtree(home, ignore_errors=True)
    if args.db == "postgres":
        _drop_schema(args.pg_url, url)
    return {
        "db": args.db,
        "interval_s": args.interval,
        "latency_ms_p50": round(statistics.median(lat), 1),
        "latency_ms_p99": round(lat[max(0, int(len(lat) * 0.99) - 1)], 1),
        "latency_ms_max": round(lat[-1], 1),
        "backlog": args.backlog,
        "drain_per_s": round(args.backlog / drain_s, 1),
    }


def _pg_database(base: str | None) -> str:
    if not base:
        raise SystemExit("--db postgres needs --pg-url or $SHUNTER_TEST_POSTGRES_URL")
    import sqlalchemy as sa

    schema = "bench_" + secrets.token_hex(4)
    engine = sa.create_engine(base)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    engine.dispose()
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}options=-csearch_path%3D{schema}"


def _drop_schema(base: str, url: str) -> None:
    import sqlalchemy as sa

    schema = url.rsplit("%3D", 1)[1]
    engine = sa.create_engine(base)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
    engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--backlog", type=int, default=200)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--pg-url", default=os.environ.get("SHUNTER_TEST_POSTGRES_URL"))
    result = run(p.parse_args())
    width = max(len(k) for k in result)
    for k, v in result.items():
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
