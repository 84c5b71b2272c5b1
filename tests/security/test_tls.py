"""``shunter serve --ssl-certfile/--ssl-keyfile`` serves HTTPS (on main 187a972 there was no
TLS option). Starts a real server process (memory launcher, no Ray): marked slow."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_serve_speaks_https_with_the_given_certificate(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    port = _free_port()
    ctx = ssl.create_default_context(cafile=str(cert))
    env = {
        **os.environ,
        "SHUNTER_HOME": str(tmp_path / "home"),
        "SHUNTER_LAUNCHER": "memory",
        "SHUNTER_RUN_SCHEDULER": "false",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "shunter.cli", "serve", "--port", str(port),
         "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                r = httpx.get(f"https://127.0.0.1:{port}/healthz", verify=ctx, timeout=2)
                break
            except httpx.TransportError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.5)
        assert r.status_code == 200
        assert r.headers["x-content-type-options"] == "nosniff"
        with pytest.raises(httpx.TransportError):  # plain HTTP is not served on that port
            httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).raise_for_status()
        assert os.stat(tmp_path / "home").st_mode & 0o777 == 0o700
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
