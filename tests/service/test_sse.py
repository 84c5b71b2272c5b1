"""SSE metrics stream: points and status changes, resume with Last-Event-ID, end event."""

from __future__ import annotations

import json
from typing import Any

from svc_helpers import bearer, claim, internal, submit


def _events(text: str) -> list[tuple[str | None, str, Any]]:
    out = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line.startswith(":"):
                continue
            key, _, value = line.partition(": ")
            fields[key] = value
        if "event" in fields:
            out.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
    return out


def _finished_job(client: Any, admin_token: str, db: Any) -> str:
    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = bearer(t)
    client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
    pts = [{"step": s, "name": "loss", "value": 1.0 / (s + 1)} for s in range(4)]
    client.post(internal(job_id, n, "metrics"), json={"points": pts}, headers=h)
    client.post(internal(job_id, n, "status"), json={"status": "succeeded"}, headers=h)
    return job_id


def test_stream_sends_points_then_end(client: Any, admin_token: str, db: Any) -> None:
    job_id = _finished_job(client, admin_token, db)
    with client.stream(
        "GET", f"/v1/jobs/{job_id}/metrics/stream", headers=bearer(admin_token)
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        text = "".join(r.iter_text())
    events = _events(text)
    kinds = [e[1] for e in events]
    assert kinds[0] == "status" and kinds[-1] == "end" and kinds.count("metric") == 4
    steps = [e[2]["step"] for e in events if e[1] == "metric"]
    assert steps == [0, 1, 2, 3]
    assert events[-1][2] == {"status": "succeeded"}
    ids = [int(e[0]) for e in events if e[1] == "metric"]
    with client.stream(
        "GET",
        f"/v1/jobs/{job_id}/metrics/stream",
        headers={**bearer(admin_token), "Last-Event-ID": str(ids[1])},
    ) as r:
        resumed = _events("".join(r.iter_text()))
    assert [e[2]["step"] for e in resumed if e[1] == "metric"] == [2, 3]


def test_stream_follows_a_live_job(client: Any, admin_token: str, db: Any) -> None:
    """Points and the final status written while the stream is open are delivered."""
    import threading
    import time

    job_id = submit(client, admin_token)["id"]
    n, t = claim(db, job_id)
    h = bearer(t)

    def driver() -> None:
        time.sleep(0.3)
        client.post(internal(job_id, n, "status"), json={"status": "running"}, headers=h)
        client.post(
            internal(job_id, n, "metrics"),
            headers=h,
            json={"points": [{"step": 1, "name": "loss", "value": 0.5}]},
        )
        time.sleep(0.2)
        client.post(
            internal(job_id, n, "status"),
            json={"status": "failed", "error": {"type": "user_error", "message": "x"}},
            headers=h,
        )

    th = threading.Thread(target=driver)
    th.start()
    with client.stream(
        "GET", f"/v1/jobs/{job_id}/metrics/stream", headers=bearer(admin_token)
    ) as r:
        text = "".join(r.iter_text())
    th.join()
    events = _events(text)
    statuses = [e[2]["status"] for e in events if e[1] == "status"]
    assert statuses[0] == "starting" and "running" in statuses
    assert [e[2]["value"] for e in events if e[1] == "metric"] == [0.5]
    assert events[-1][1:] == ("end", {"status": "failed"})
