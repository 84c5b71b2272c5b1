"""``RayLauncher`` against a head that goes away (issue 32, item 3): every call that needs
the head raises the typed ``ClusterUnavailable`` (refused connection, or a 5xx while a head
starts), a refusal of the request itself (404: no such job) keeps its meaning, and the calls
work again when a head answers at the same address. A stand-in dashboard on a free port
(the job SDK's version check, job info, the node list); no Ray is started."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from launcher.ray_head import free_port
from launcher.ray_launcher import RayLauncher, RayLauncherConfig
from service.launch import ClusterUnavailable, LaunchState

_JOB: dict[str, Any] = {
    "type": "SUBMISSION", "job_id": None, "submission_id": "j-1", "driver_info": None,
    "status": "RUNNING", "entrypoint": "python -m worker.launch_driver", "message": "",
    "error_type": None, "start_time": 1, "end_time": None, "metadata": {},
    "runtime_env": {}, "driver_agent_http_address": None, "driver_node_id": None,
    "driver_exit_code": None,
}  # fmt: skip


class Dashboard:
    """A dashboard that answers, answers 503 (``mode="busy"``), or is gone (``stop()``)."""

    def __init__(self, port: int) -> None:
        self.port, self.mode = port, "ok"
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                return None

            def do_GET(self) -> None:
                if self.path == "/api/version":
                    self._send(200, {"version": "4", "ray_version": "2.60.0", "ray_commit": "x"})
                elif outer.mode == "busy":
                    self._send(503, {"msg": "GCS unavailable"})
                elif self.path == "/api/jobs/j-1":
                    self._send(200, _JOB)
                elif self.path.startswith("/api/jobs/"):
                    self._send(404, {"msg": "Job does not exist"})
                elif self.path == "/api/cluster_status":
                    usage: dict[str, Any] = {
                        "clusterStatus": {"loadMetricsReport": {"usageByNode": {}}}
                    }
                    self._send(200, {"result": True, "msg": "", "data": usage})
                else:
                    nodes = {"total": 0, "result": []}
                    self._send(200, {"result": True, "msg": "", "data": {"result": nodes}})

            def _send(self, code: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._handler = Handler
        self.start()

    def start(self) -> None:
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(10)


@pytest.fixture
def dashboard() -> Iterator[Dashboard]:
    d = Dashboard(free_port())
    try:
        yield d
    finally:
        if d.thread.is_alive():
            d.stop()


def test_a_head_that_goes_away_is_unavailable_then_answers_again(dashboard: Dashboard) -> None:
    launcher = RayLauncher(
        RayLauncherConfig(dashboard_url=f"http://127.0.0.1:{dashboard.port}", http_timeout_s=5)
    )
    try:
        assert launcher.status("j-1").state == LaunchState.RUNNING
        assert launcher.status("j-2").state == LaunchState.UNKNOWN  # 404: no such job
        dashboard.mode = "busy"  # a head whose GCS is away answers 5xx
        with pytest.raises(ClusterUnavailable, match="status code 503"):
            launcher.status("j-1")
        with pytest.raises(ClusterUnavailable):
            launcher.cluster()
        dashboard.stop()  # the head is gone: connection refused
        for call in (
            lambda: launcher.status("j-1"),
            lambda: launcher.statuses(["j-1", "a", "b", "c", "d"]),
            lambda: launcher.stop("j-1"),
            lambda: launcher.logs("j-1"),
            launcher.cluster,
        ):
            with pytest.raises(ClusterUnavailable, match="ray head unavailable"):
                call()
        dashboard.mode = "ok"
        dashboard.start()  # a head at the same address again: no new launcher needed
        assert launcher.status("j-1").state == LaunchState.RUNNING
        assert launcher.cluster().nodes == []
    finally:
        launcher.close()


class FakeHead:
    """Stands for ``RayHead``: ``restart()`` brings the dashboard back."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard, self.up, self.restarts, self.stops = dashboard, True, 0, 0
        self.gcs_address = "127.0.0.1:1"

    def alive(self) -> bool:
        return self.up

    def restart(self) -> None:
        self.restarts += 1
        self.dashboard.start()
        self.up = True

    def stop(self) -> None:
        self.stops += 1


def test_the_embedded_head_is_started_again_when_it_died(dashboard: Dashboard) -> None:
    head = FakeHead(dashboard)
    url = f"http://127.0.0.1:{dashboard.port}"
    launcher = RayLauncher(RayLauncherConfig(dashboard_url=url, http_timeout_s=5), head=head)  # type: ignore[arg-type]
    try:
        dashboard.stop()
        with pytest.raises(ClusterUnavailable):  # the process is still there: not ours to restart
            launcher.cluster()
        assert head.restarts == 0
        head.up = False  # the head's process group is gone
        assert launcher.cluster().nodes == []  # started again, then asked again
        assert (head.restarts, launcher.head_restarts) == (1, 1)
        assert launcher.status("j-1").state == LaunchState.RUNNING
    finally:
        launcher.close()
    assert head.stops == 1
    head.up = False
    assert launcher._revive() is False  # closed: never started again
    assert head.restarts == 1
