"""The bar's restart, with real processes: ``shunter serve`` queues a ``job.cancelled`` while
the receiver is down, is killed with SIGKILL, and a new ``shunter serve`` over the same
database delivers it, once, signed, when the receiver is back."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.procs import kill_group
from tests.service.svc_helpers import tiny_spec
from tests.service.webhooks.receiver import Receiver

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SHUNTER_HOME": str(home),
        "SHUNTER_LAUNCHER": "memory",
        "SHUNTER_RUN_SCHEDULER": "false",
        "SHUNTER_WEBHOOK_ALLOW": "127.0.0.1",
        "SHUNTER_WEBHOOK_INTERVAL_S": "0.1",
        "SHUNTER_WEBHOOK_RETRY_DELAYS_S": ",".join(["0.3"] * 40),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "shunter.cli", "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).is_success:
                return proc
        except httpx.TransportError:
            pass
        assert proc.poll() is None, "shunter serve exited"
        time.sleep(0.2)
    raise AssertionError("shunter serve did not start")


def test_sigkilled_service_delivers_pending_after_restart(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    (home / "data" / "train.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    receiver = Receiver().start()
    hook_port = receiver.port
    receiver.stop()  # down
    port = _free_port()
    api = f"http://127.0.0.1:{port}"
    first = _serve(home, port)
    try:
        auth = {"Authorization": "Bearer " + (home / "admin.token").read_text().strip()}
        r = httpx.post(f"{api}/v1/webhooks/endpoints", headers=auth,
                       json={"url": f"http://127.0.0.1:{hook_port}/hook"})  # fmt: skip
        assert r.status_code == 201, r.text
        secret = r.json()["secret"]
        r = httpx.post(f"{api}/v1/jobs", headers=auth, json=tiny_spec())
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        assert httpx.post(f"{api}/v1/jobs/{job_id}/cancel", headers=auth).is_success
        deadline = time.monotonic() + 30
        while True:  # tried while the receiver is down, and still pending
            d = httpx.get(f"{api}/v1/webhooks/deliveries", headers=auth).json()["data"]
            if d and d[0]["attempts"] >= 2:
                break
            assert time.monotonic() < deadline, d
            time.sleep(0.1)
        assert d[0]["status"] == "pending"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        kill_group(first.pid)
    receiver = Receiver(port=hook_port).start()
    second = _serve(home, port)
    try:
        deadline = time.monotonic() + 30
        while not receiver.messages():
            assert time.monotonic() < deadline, "the pending delivery never came"
            time.sleep(0.1)
        time.sleep(1.0)  # and nothing comes twice
        got = receiver.messages()
        assert len(got) == 1
        headers, body = got[0]
        key = base64.b64decode(secret.removeprefix("whsec_"))
        signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
        want = "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        assert want in headers["webhook-signature"].split()
        assert headers["webhook-id"] == d[0]["id"] and job_id.encode() in body
        os.killpg(second.pid, signal.SIGTERM)
        second.wait(30)
    finally:
        kill_group(second.pid)
        receiver.stop()
