"""A resumed attempt trains again the steps past the checkpoint it resumed from, so those
steps have a point per attempt. ``GET /v1/jobs/{id}/metrics`` lists each (step, name) once,
from the newest attempt that ran it; ``?attempts=all`` lists every point. The UI's chart
keeps the same rule for points the stream delivers late (``static/js/points.js``, run with
node)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from svc_helpers import bearer, claim, internal, submit

from service.jobs.checkpoint_now import request_preemption

STATIC_JS = Path(__file__).resolve().parents[2] / "service" / "http" / "static" / "js"


def _post(client: Any, job_id: str, n: int, token: str, steps: range, value: float) -> None:
    points = [{"step": s, "name": n_, "value": value + s} for s in steps for n_ in ("loss", "lr")]
    r = client.post(internal(job_id, n, "metrics"), json={"points": points}, headers=bearer(token))
    assert r.is_success, r.text


def _list(client: Any, token: str, job_id: str, **params: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cursor = None
    while True:
        q = {**params, **({"cursor": cursor} if cursor else {})}
        r = client.get(f"/v1/jobs/{job_id}/metrics", params=q, headers=bearer(token))
        assert r.status_code == 200, r.text
        out += r.json()["data"]
        cursor = r.json()["next_cursor"]
        if not cursor:
            return out


def test_each_step_once_from_the_newest_attempt(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    n1, t1 = claim(db, job_id)
    client.post(internal(job_id, n1, "status"), json={"status": "running"}, headers=bearer(t1))
    _post(client, job_id, n1, t1, range(1, 7), 100.0)  # attempt 1 reached step 6
    # One attempt: nothing superseded, nothing hidden.
    assert len(_list(client, admin_token, job_id)) == 12
    db.write(lambda s: request_preemption(s, job_id=job_id, cause="preempt", detail="x"))
    r = client.post(
        internal(job_id, n1, "status"), json={"status": "preempted", "step": 6},
        headers=bearer(t1),
    )  # fmt: skip
    assert r.is_success, r.text
    n2, t2 = claim(db, job_id)
    assert n2 == 2
    _post(client, job_id, n2, t2, range(5, 9), 200.0)  # resumed from step 4: 5, 6 ran again

    for params in ({}, {"limit": 3}, {"name": "loss"}, {"name": "loss", "limit": 2}):
        got = [p for p in _list(client, admin_token, job_id, **params) if p["name"] == "loss"]
        assert [(p["step"], p["attempt"]) for p in got] == [
            (1, 1), (2, 1), (3, 1), (4, 1), (5, 2), (6, 2), (7, 2), (8, 2)
        ], params  # fmt: skip
        assert [p["value"] for p in got] == [101, 102, 103, 104, 205, 206, 207, 208]
    # Every attempt's points on request: steps 5 and 6 twice, in arrival order.
    every = [p for p in _list(client, admin_token, job_id, attempts="all") if p["name"] == "lr"]
    assert [(p["step"], p["attempt"]) for p in every] == [
        (1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (5, 2), (6, 2), (7, 2), (8, 2)
    ]  # fmt: skip
    # Only the two modes.
    r = client.get(
        f"/v1/jobs/{job_id}/metrics", params={"attempts": "some"}, headers=bearer(admin_token)
    )
    assert r.status_code == 422


@pytest.mark.skipif(shutil.which("node") is None, reason="no node to run the UI module")
def test_the_ui_keeps_the_newest_attempts_point_per_step(tmp_path: Path) -> None:
    stream = [  # history (newest attempt per step), then the stream: a late attempt-1 point
        {"name": "loss", "step": 5, "attempt": 2, "value": 2.5},
        {"name": "loss", "step": 6, "attempt": 2, "value": 2.6},
        {"name": "loss", "step": 6, "attempt": 1, "value": 1.6},  # late: dropped
        {"name": "lr", "step": 6, "attempt": 1, "value": 0.1},  # another series: kept
        {"name": "loss", "step": 7, "attempt": 2, "value": 2.7},
        {"name": "loss", "step": 7, "attempt": 3, "value": 3.7},  # newer: replaces
        {"name": "loss", "step": 7, "attempt": 3, "value": 3.8},  # same attempt: replaces
        {"name": "loss", "step": 8, "value": 9.0},  # no attempt (an old server): kept
    ]
    script = tmp_path / "check.mjs"
    script.write_text(
        f"import {{ NewestAttempt }} from {json.dumps((STATIC_JS / 'points.js').as_uri())};\n"
        "const f = new NewestAttempt();\n"
        f"console.log(JSON.stringify({json.dumps(stream)}.map((p) => f.keep(p))));\n"
    )
    done = subprocess.run(
        ["node", str(script)], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout) == [True, True, False, True, True, True, True, True]
