"""``worker.log_shipper``: batches reach the API with their stream offsets (against the real
log store behind a mock transport), a failed batch is resent, a 409 stops shipping."""

from __future__ import annotations

from pathlib import Path

import httpx

from service.jobs.logs import LogStore
from worker.internal_api import InternalApi, RetryPolicy
from worker.log_shipper import LogShipper


def _api(handler: object) -> InternalApi:
    return InternalApi(
        api_url="http://api",
        token="t",
        job_id="job-1",
        attempt=1,
        retry=RetryPolicy(attempts=1),
        transport=httpx.MockTransport(handler),  # type: ignore[arg-type]
    )


def test_batches_land_in_order_and_a_failed_one_is_resent(tmp_path: Path) -> None:
    store = LogStore(tmp_path, cap_bytes=1 << 20)
    calls = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] == 2:
            return httpx.Response(503)  # one transient failure
        end = store.append(
            job_id="job-1",
            attempt=1,
            offset=int(request.url.params["offset"]),
            data=request.content,
        )
        return httpx.Response(200, json={"next_offset": end})

    shipper = LogShipper(_api(handler), interval_s=0.05, batch_bytes=10)
    shipper.start(capture=False)
    expected = b"".join(f"line {i}\n".encode() for i in range(20))
    for i in range(20):
        shipper.feed(f"line {i}\n".encode())
    assert shipper.flush(10)
    shipper.close()
    assert store.read(job_id="job-1", attempt=1, offset=0, limit=10_000).data == expected
    assert calls["n"] > 3


def test_a_fenced_attempt_stops_shipping() -> None:
    def handler(_request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"detail": "stale"})

    shipper = LogShipper(_api(handler), interval_s=0.05)
    shipper.start(capture=False)
    shipper.feed(b"x\n")
    assert shipper.flush(5) is False and shipper.fenced.is_set()
    shipper.close()
