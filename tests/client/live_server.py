"""A real Shunter API on a free port, for the client, CLI and browser tests.

``LiveServer`` runs ``service.app.create_app`` under uvicorn in a thread, with a temp SQLite
database, the in-memory launcher and a fast scheduler tick. No Ray: a job is driven by
:class:`FakeDriver`, which does over HTTP exactly what ``worker.driver`` does — it takes the
attempt token from the launch request the scheduler handed the launcher and calls the
internal endpoints (status, metrics batches, checkpoints) with it.

Shared by ``tests/client``, ``tests/cli`` and ``tests/browser`` (their conftests put this
folder on ``sys.path``).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from service.launch import InMemoryLauncher, LaunchRequest, NodeResources
from shunter.client import Client
from tests.service.svc_helpers import tiny_spec

__all__ = ["CPUS", "FakeDriver", "LiveServer", "live_server", "valid_spec"]

CPUS = 64  # the in-memory cluster: one node, CPUs only


# A small spec that passes server validation (data file under the test data root): the same
# one the service tests use.
valid_spec = tiny_spec


@dataclass
class FakeDriver:
    """Plays the Ray-side driver of one attempt against the internal API."""

    url: str
    req: LaunchRequest
    _http: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self._http = httpx.Client(
            base_url=f"{self.url}/v1/internal/jobs/{self.req.job_id}/attempts/{self.req.attempt}",
            headers={"Authorization": f"Bearer {self.req.attempt_token}"},
            timeout=60,
        )

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        # Retry transport errors as the real driver does: a pooled keep-alive connection the
        # server has just closed (idle > uvicorn's 5 s on a loaded machine) fails once. The
        # internal endpoints are idempotent, so a retried POST is harmless.
        for attempt in range(3):
            try:
                r = self._http.post(path, json=body)
                break
            except httpx.TransportError:
                if attempt == 2:
                    raise
                time.sleep(0.2)
        r.raise_for_status()
        return r.json()

    def log(self, text: str) -> int:
        """Ship ``text`` as the next output of this attempt, as the real log shipper does."""
        offset = getattr(self, "_log_offset", 0)
        r = self._http.post("/logs", params={"offset": offset}, content=text.encode())
        r.raise_for_status()
        self._log_offset: int = int(r.json()["next_offset"])
        return self._log_offset

    def status(self, status: str, *, error: dict[str, str] | None = None, **extra: Any) -> Any:
        return self._post("/status", {"status": status, "error": error, **extra})

    def metrics(self, points: list[dict[str, Any]], *, step: int, total: int) -> Any:
        progress = {"step": step, "total_steps": total, "epoch": step / total}
        return self._post("/metrics", {"points": points, "progress": progress})

    def loss(self, step: int, total: int) -> Any:
        """Report a plausible falling loss and a decaying learning rate at ``step``."""
        lr = 5e-5 * (1 - step / total)
        loss = 0.69 * (0.93**step) + 0.05
        return self.metrics(
            [
                {"step": step, "name": "loss", "value": loss},
                {"step": step, "name": "learning_rate", "value": lr},
            ],
            step=step,
            total=total,
        )

    def output_dir(self) -> str:
        """The job's output directory: a worker may only report URIs inside it."""
        r = self._http.get("/spec")
        r.raise_for_status()
        out: str = r.json()["output_dir"]
        return out

    def checkpoint(self, step: int) -> Any:
        body = {
            "step": step,
            "uri": f"{self.output_dir()}/step-{step}",
            "bytes": 1234 * step,
            "metrics": {"loss": 0.5},
            "verified": True,
        }
        return self._post("/checkpoints", body)

    def close(self) -> None:
        self._http.close()


@dataclass
class LiveServer:
    url: str
    data_root: Path
    admin_token: str
    launcher: InMemoryLauncher
    home: Path

    def client(self, token: str | None = None) -> Client:
        return Client(self.url, token or self.admin_token, timeout=60)

    def launched(self, job_id: str, *, attempt: int = 1, timeout: float = 60.0) -> LaunchRequest:
        """Wait until the scheduler has handed ``attempt`` of the job to the launcher."""
        key = f"{job_id}-{attempt}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            req = self.launcher.submitted.get(key)
            if req is not None:
                return req
            time.sleep(0.05)
        raise AssertionError(
            f"{key} was never launched; submitted: {list(self.launcher.submitted)}"
        )

    def driver(self, job_id: str, *, attempt: int = 1) -> FakeDriver:
        return FakeDriver(self.url, self.launched(job_id, attempt=attempt))

    def member_token(self, team: str) -> str:
        """A fresh team (if needed) and a member token for it."""
        with self.client() as admin:
            if team not in {t.name for t in admin.teams()}:
                admin.create_team(team)
            return admin.create_token(team=team, role="member", name=f"{team}-member").token


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


@contextmanager
def live_server(
    tmp: Path, *, data_setup: Callable[[Path], object] | None = None, **overrides: Any
) -> Iterator[LiveServer]:
    """Serve the real app on a free port until the block ends.

    The data root (``tmp/data``) holds ``train.tsv`` for :func:`valid_spec`, plus whatever
    ``data_setup(root)`` writes. ``overrides``: more ``Settings`` (a ``database_url``, shorter
    leases).
    """
    from service.app import create_app
    from service.settings import Settings

    data_root = tmp / "data"
    data_root.mkdir(parents=True, exist_ok=True)
    (data_root / "train.tsv").write_text("sentence\tlabel\ngood film\t1\nbad film\t0\n")
    if data_setup is not None:
        data_setup(data_root)
    sock = _free_socket()
    port = sock.getsockname()[1]
    values: dict[str, Any] = dict(
        home=tmp / "home",
        launcher="memory",
        # As on a default server: $SHUNTER_HOME/data (the linked MiniLM model) is a root too.
        data_roots=[data_root, tmp / "home" / "data"],
        host="127.0.0.1",
        port=port,
        scheduler_interval_s=0.1,
        sweep_interval_s=0.1,
        lease_seconds=120,
        sse_poll_seconds=0.1,
        auth_cache_seconds=0,
    )
    settings = Settings(**{**values, **overrides})
    # One roomy node: jobs that tests leave running must not make later tests' jobs queue.
    launcher = InMemoryLauncher(nodes=[NodeResources(
        node_id="local", address="127.0.0.1", alive=True,
        total_cpus=CPUS, free_cpus=CPUS, total_gpus=0, free_gpus=0,
    )])  # fmt: skip
    app = create_app(settings, launcher=launcher)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("test API server did not start")
        time.sleep(0.02)
    try:
        token = (settings.home / "admin.token").read_text().strip()
        yield LiveServer(
            url=f"http://127.0.0.1:{port}",
            data_root=data_root,
            admin_token=token,
            launcher=launcher,
            home=settings.home,
        )
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()
