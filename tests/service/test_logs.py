"""Durable logs: the store (idempotent appends by offset, the per-job cap, byte ranges cut at a
whole character, tails), the driver's internal endpoint (token, grace after the attempt ended)
and ``GET /v1/jobs/{id}/logs`` (range, clamp to the max page, tail, SSE follow)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from svc_helpers import bearer, claim, internal, submit

from service.db.tables import Attempt
from service.jobs.logs import LogStore
from service.jobs.states import JobStatus, transition

PAGE_MAX = 1024


@pytest.fixture
def settings(make_settings: Any) -> Any:
    return make_settings(log_page_max_bytes=PAGE_MAX, log_grace_seconds=30)


def _store(tmp_path: Path, cap: int = 1 << 20, segment: int = 4096) -> LogStore:
    return LogStore(tmp_path / "storage", cap_bytes=cap, segment_bytes=segment)


def test_append_is_idempotent_by_offset(tmp_path: Path) -> None:
    s = _store(tmp_path)
    assert s.append(job_id="j", attempt=1, offset=0, data=b"hello ") == 6
    assert s.append(job_id="j", attempt=1, offset=0, data=b"hello ") == 6  # a retry
    assert s.append(job_id="j", attempt=1, offset=3, data=b"lo world\n") == 12  # overlap
    assert s.read(job_id="j", attempt=1, offset=0, limit=100).data == b"hello world\n"
    assert s.append(job_id="j", attempt=2, offset=0, data=b"two\n") == 4
    assert s.attempts("j") == [1, 2]


def test_cap_rotates_out_the_oldest_segments(tmp_path: Path) -> None:
    s = _store(tmp_path, cap=10_000, segment=4096)
    line = b"x" * 99 + b"\n"
    end = 0
    for _ in range(300):  # 30 kB into a 10 kB cap
        end = s.append(job_id="j", attempt=1, offset=end, data=line)
    assert end == 30_000
    kept = sum(p.stat().st_size for p in (tmp_path / "storage/j/logs/attempt-0001").glob("*.log"))
    assert kept <= 10_000 + 4096
    page = s.read(job_id="j", attempt=1, offset=0, limit=500)
    assert page.truncated and page.offset == page.first_offset > 0
    assert page.next_offset == page.offset + 500 and page.size == 30_000


def test_range_reads_cut_at_a_whole_character_and_tail_starts_a_line(tmp_path: Path) -> None:
    s = _store(tmp_path)
    text = "é" * 10 + "\nlast line\n"  # é is 2 bytes
    s.append(job_id="j", attempt=1, offset=0, data=text.encode())
    page = s.read(job_id="j", attempt=1, offset=0, limit=5)
    assert (page.text, page.next_offset) == ("éé", 4)
    rest = s.read(job_id="j", attempt=1, offset=page.next_offset, limit=1000)
    assert page.text + rest.text == text
    assert s.tail(job_id="j", attempt=1, nbytes=14).text == "last line\n"


def _post(client: Any, job_id: str, n: int, token: str, offset: int, data: bytes) -> Any:
    return client.post(
        internal(job_id, n, "logs"), params={"offset": offset}, content=data, headers=bearer(token)
    )


def test_driver_ships_and_users_read_by_range(client: Any, admin_token: str, db: Any) -> None:
    job_id = submit(client, admin_token)["id"]
    n, token = claim(db, job_id)
    body = b"".join(f"line {i:04d}\n".encode() for i in range(300))  # 3,000 bytes
    assert _post(client, job_id, n, token, 0, body[:1000]).json() == {"next_offset": 1000}
    assert _post(client, job_id, n, token, 0, body).json() == {"next_offset": 3000}
    assert _post(client, job_id, n, "wrong", 3000, b"x").status_code == 401
    h = bearer(admin_token)
    page = client.get(f"/v1/jobs/{job_id}/logs", params={"offset": 0, "limit": 10**6}, headers=h)
    got = page.json()
    assert (got["offset"], got["next_offset"], got["size"]) == (0, PAGE_MAX, 3000)  # clamped
    assert got["text"].encode() == body[:PAGE_MAX] and got["source"] == "store"
    text, offset = "", 0
    while offset < 3000:
        got = client.get(f"/v1/jobs/{job_id}/logs", params={"offset": offset}, headers=h).json()
        text, offset = text + got["text"], got["next_offset"]
    assert text.encode() == body
    tail = client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 25}, headers=h).json()
    assert tail["text"] == "line 0298\nline 0299\n"  # the window began mid-line
    tail = client.get(f"/v1/jobs/{job_id}/logs", params={"tail": 30}, headers=h).json()
    assert tail["text"] == "line 0297\nline 0298\nline 0299\n"  # exactly three whole lines


def test_output_closes_after_the_grace_and_follow_ends(
    client: Any, admin_token: str, db: Any
) -> None:
    job_id = submit(client, admin_token)["id"]
    n, token = claim(db, job_id)
    assert _post(client, job_id, n, token, 0, b"started\n").status_code == 200
    db.write(lambda s: transition(s, job_id=job_id, to=JobStatus.FAILED, message="boom"))
    # Within the grace: the driver's last lines are still taken.
    assert _post(client, job_id, n, token, 8, b"Traceback\n").json() == {"next_offset": 18}
    db.write(
        lambda s: s.execute(
            update(Attempt)
            .where(Attempt.job_id == job_id)
            .values(ended_at=datetime(2000, 1, 1, tzinfo=UTC))
        )
    )
    assert _post(client, job_id, n, token, 18, b"late\n").status_code == 409
    with client.stream(
        "GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=bearer(admin_token)
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = "".join(r.iter_text())
    events = [
        (b.split("event: ")[1].split("\n")[0], json.loads(b.split("data: ")[1]))
        for b in raw.split("\n\n")
        if "event: " in b
    ]
    assert events[0] == (
        "log",
        {"attempt": n, "offset": 0, "next_offset": 18, "text": "started\nTraceback\n",
         "truncated": False},
    )  # fmt: skip
    assert events[-1][0] == "end" and events[-1][1]["status"] == "failed"
