"""Webhook backlog benchmark (issue 32, item 5): with ``--backlog`` deliveries queued to one
endpoint by two long-running jobs (a hung one, a diverging one), how long a new job's events
(two ``job.checkpoint``, then ``job.succeeded``) take to reach the receiver, and in what order.

    python bench/webhook_backlog.py [--backlog 1000] [--receiver-ms 10] [--db sqlite|postgres]
                                    [--pg-url URL]

Two senders over the same queue, each on a fresh database: ``fair`` is the service's
(``DeliveryWorker``: one head per (endpoint, job) stream, round-robin, claims again as each
request ends); ``fifo`` is the sender before issue 32 (the oldest due rows first, 20 at a time,
4 at once, each batch waiting for its slowest), measured in the same run as the baseline.
Latency is from the new job's ``job.succeeded`` being queued (all rows queued before the
sender starts) to the receiver's read of the last of the three; the ratio is fifo / fair.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("SHUNTER_RATE_LIMIT_PER_MINUTE", "0")

from webhooks import _drop_schema, _pg_database, _spec  # the sibling bench


class Receiver:
    """Records (arrival time, job id, event key) of every POST; answers 204."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.got: list[tuple[float, str, str]] = []
        self._server: ThreadingHTTPServer | None = None
        self.port = 0

    def start(self) -> Receiver:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = json.loads(self.rfile.read(int(self.headers["content-length"])))["data"]
                time.sleep(owner.delay_s)  # a receiver's own work before it answers
                owner.got.append((time.monotonic(), data["id"], data["key"]))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def _fifo_due_rows(session: Any, *, limit: int, hold_attempts: int = 3) -> list[Sequence[Any]]:
    """The due query before issue 32: oldest due first, no regard for endpoint or job."""
    from sqlalchemy import case, select

    from service.db.sqltime import utcnow
    from service.db.tables import WebhookDelivery as D
    from service.db.tables import WebhookEndpoint as E
    from service.webhooks.sender import _free

    previous = case((E.previous_secret_until > utcnow(), E.previous_secret), else_=None)
    return list(
        session.execute(
            select(D.id, D.msg_id, D.endpoint_id, E.url, D.body, D.attempts, E.secret, previous)
            .join(E, E.id == D.endpoint_id)
            .where(
                D.status == "pending",
                D.next_attempt_at <= utcnow(),
                E.disabled_at.is_(None),
                _free(),
            )
            .order_by(D.next_attempt_at, D.id)
            .limit(limit)
        ).all()
    )


def _fifo_sender(db: Any, config: Any, stop: threading.Event) -> None:
    """The sender loop before issue 32: a batch of 20, 4 at once, the next batch after it."""
    from concurrent.futures import ThreadPoolExecutor

    from service.webhooks import sender as delivery

    with delivery._client() as client:
        while not stop.is_set():
            rows = db.read(lambda s: _fifo_due_rows(s, limit=20))
            claimed = db.write(lambda s, rows=rows: delivery.claim(s, rows, lease_s=config.lease_s))
            with ThreadPoolExecutor(max_workers=4) as pool:
                list(
                    pool.map(
                        lambda c: delivery._attempt(db, c, config=config, client=client), claimed
                    )
                )
            if not claimed:
                time.sleep(0.05)


def run_one(mode: str, args: argparse.Namespace) -> dict[str, Any]:
    from fastapi.testclient import TestClient
    from sqlalchemy.orm import Session

    from service.app import create_app
    from service.db.migrate import upgrade
    from service.db.tables import utcnow_py
    from service.settings import Settings
    from service.webhooks.events import WebhookEvent
    from service.webhooks.outbox import enqueue
    from service.webhooks.sender import DeliveryConfig, DeliveryWorker
    from service.webhooks.ssrf import parse_allow

    home = Path(tempfile.mkdtemp(prefix="bench-webhook-backlog-"))
    (home / "data" / "tiny").mkdir(parents=True)
    (home / "data" / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    (home / "data" / "tiny" / "config.json").write_text('{"model_type": "bert"}')
    url = f"sqlite:///{home / 'shunter.db'}" if args.db == "sqlite" else _pg_database(args.pg_url)
    upgrade(url)
    settings = Settings(
        home=home, database_url=url, launcher="memory", run_scheduler=False,
        migrate_on_start=False, webhook_allow=["127.0.0.1"], deliver_webhooks=False,
        data_roots=[home / "data"],
    )  # fmt: skip
    receiver = Receiver(args.receiver_ms / 1000).start()
    app = create_app(settings)
    with TestClient(app) as client:
        auth = {"Authorization": "Bearer " + settings.admin_token_path.read_text().strip()}
        r = client.post(
            "/v1/webhooks/endpoints",
            json={"url": f"http://127.0.0.1:{receiver.port}/h"},
            headers=auth,
        )
        assert r.status_code == 201, r.text
        hung, diverging, new = (
            client.post("/v1/jobs", json=_spec(home / "data"), headers=auth).json()["id"]
            for _ in range(3)
        )
        db = app.state.shunter.db
        half = args.backlog // 2
        plan = [(hung, f"h{i:05d}", "job.hung") for i in range(half)]
        plan += [(diverging, f"d{i:05d}", "job.diverged") for i in range(args.backlog - half)]
        plan += [(new, "c1", "job.checkpoint"), (new, "c2", "job.checkpoint")]
        plan += [(new, "end", "job.succeeded")]

        def _queue(s: Session) -> None:
            for job_id, key, type_ in plan:
                event = WebhookEvent(
                    type_=type_, event_key=key, created_at=utcnow_py(), extra={"key": key}
                )
                enqueue(s.connection(), job_id=job_id, webhook=event)

        db.write(_queue)
        config = DeliveryConfig(allow=parse_allow(["127.0.0.1"]))
        stop = threading.Event()
        start = time.monotonic()  # every row is queued: the clock starts with the sender
        if mode == "fair":
            worker = DeliveryWorker(db=db, config=config, interval_s=0.05)
            worker.start()
        else:
            thread = threading.Thread(target=_fifo_sender, args=(db, config, stop), daemon=True)
            thread.start()
        deadline = start + 600
        while sum(j == new for _, j, _ in receiver.got) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
        got = list(receiver.got)
        stop.set()
        if mode == "fair":
            worker.stop()
        else:
            thread.join(60)
    receiver.stop()
    shutil.rmtree(home, ignore_errors=True)
    if args.db == "postgres":
        _drop_schema(args.pg_url, url)
    mine = [(t, k) for t, j, k in got if j == new]
    if len(mine) < 3:
        raise SystemExit(f"{mode}: the new job's events did not all arrive in 600 s")
    return {
        "latency_s": round(mine[-1][0] - start, 3),
        "order": " ".join(k for _, k in mine),
        "backlog_sent_first": max(i for i, (_, j, _) in enumerate(got) if j == new) - 2,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backlog", type=int, default=1000)
    p.add_argument("--receiver-ms", type=float, default=10.0, help="receiver's time per POST")
    p.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--pg-url", default=os.environ.get("SHUNTER_TEST_POSTGRES_URL"))
    args = p.parse_args()
    fair = run_one("fair", args)
    fifo = run_one("fifo", args)
    print(
        f"backlog {args.backlog} deliveries to one endpoint, db {args.db}, "
        f"receiver {args.receiver_ms:g} ms per POST"
    )
    for name, r in (("fair (now)", fair), ("fifo (before)", fifo)):
        print(
            f"{name:<14} new job's 3 events in {r['latency_s']:>7.3f} s, order [{r['order']}], "
            f"{r['backlog_sent_first']} backlog deliveries sent before them"
        )
    print(f"ratio fifo/fair: {fifo['latency_s'] / max(fair['latency_s'], 1e-6):.1f}x")


if __name__ == "__main__":
    main()
