"""An embedded local Ray head, started and stopped by the service as a child process.

``RayHead.start(config)`` runs ``ray start --head --block`` in its own process group with
free loopback ports for everything Ray listens on (the GCS never on 6379: a Redis may hold
it), token auth on, a short ``--temp-dir`` (Ray's unix sockets live under it and the
socket path limit is ~107 bytes), and waits until the dashboard's job API answers.
``stop()`` ends the whole process group: SIGTERM, then SIGKILL after ``stop_timeout_s``.

Token auth: Ray 2.60 turns it on for the dashboard/job API. We generate one token per
process (or reuse ``RAY_AUTH_TOKEN`` when it is already set) and export ``RAY_AUTH_MODE=token``
and ``RAY_AUTH_TOKEN`` into this process's environment, because Ray's client side
(``JobSubmissionClient``, the state API, ``ray.init``) reads them from there, and the head
and every Ray worker inherit them. Nothing is written to ``~/.ray``.

GCS fault tolerance: with ``redis_address`` the head's GCS keeps its tables in that Redis
(``RAY_REDIS_ADDRESS``, under ``storage_namespace``), so a head started again against it knows
the cluster's jobs, actors and nodes. ``restart()`` starts the head again on the same GCS and
dashboard ports (fresh ones for the raylet and agents), temp dir and Redis: the same address
for the service and any worker node (whose raylet waits
``RAY_gcs_rpc_server_reconnect_timeout_s`` for it). A single-node embedded head loses
its running jobs with it anyway (their workers die with its raylet); the service resumes them
from their checkpoints (docs/reliability.md).

Errors: ``RayHeadError`` (the head exited or never became ready; the message carries the
tail of its log).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

log = logging.getLogger(__name__)

__all__ = [
    "RayHead",
    "RayHeadConfig",
    "RayHeadError",
    "ensure_token_env",
    "free_port",
    "free_ports",
]

# Unix socket paths (sun_path) are limited to 108 bytes including the NUL; Ray appends
# ``session_<date>_<pid>/sockets/plasma_store`` (~60 bytes) to the temp dir.
_MAX_TEMP_DIR_LEN = 40


def _loopback_env(host: str) -> dict[str, str]:
    """Keep a loopback head on loopback.

    Ray replaces a ``127.0.0.1`` node address with the machine's outward IP (so other nodes
    could join) unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``; then GCS, raylet, client
    server and workers all talk over 127.0.0.1 and nothing listens on a public interface.
    """
    if host in ("127.0.0.1", "localhost", "::1"):
        return {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    return {}


def _gcs_ft_env(config: RayHeadConfig) -> dict[str, str]:
    """The head's environment for GCS fault tolerance (Ray's ``ray start`` way: the GCS
    reads ``RAY_REDIS_ADDRESS`` and its namespace from ``RAY_external_storage_namespace``)."""
    if not config.redis_address:
        return {}
    env = {"RAY_REDIS_ADDRESS": config.redis_address}
    if config.storage_namespace:
        env["RAY_external_storage_namespace"] = config.storage_namespace
    return env


class RayHeadError(RuntimeError):
    """The embedded Ray head could not be started (or died)."""


@dataclass(frozen=True, kw_only=True)
class RayHeadConfig:
    """How to start the embedded head.

    ``temp_root`` is where Ray's session dirs go (``$SHUNTER_HOME/ray/r``, the 0700 ``ray``
    dir guarding Ray's 0777 one); when its path is too long for unix sockets a short 0700 dir
    under /tmp guards it instead (recorded in ``RayHead.temp_dir``).
    ``num_cpus``/``num_gpus`` of None let Ray detect them.
    """

    temp_root: Path
    num_cpus: int | None = None
    num_gpus: int | None = None
    host: str = "127.0.0.1"
    ready_timeout_s: float = 180.0
    stop_timeout_s: float = 15.0
    start_attempts: int = 3
    # Extra env for the head (and so every Ray worker), e.g. Ray Train tuning knobs.
    env: dict[str, str] = field(default_factory=dict)
    # GCS fault tolerance: ``host:port`` of a Redis the GCS persists to (None: in memory),
    # its password, and the key namespace of this cluster in it.
    redis_address: str | None = None
    redis_password: str | None = None
    storage_namespace: str | None = None


def free_port(host: str = "127.0.0.1") -> int:
    """A port the OS says is free right now (bind to 0). Racy by nature; good enough locally."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free ports: all sockets stay bound until every port is chosen."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def ensure_token_env() -> str:
    """Turn on Ray token auth for this process and its children; return the token."""
    token = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32)
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = token
    return token


def _private_temp_dir(root: Path) -> Path:
    """Ray's temp dir, ``<guard>/r``, inside a guard directory of ours kept at 0700.

    Ray makes its temp dir 0777 again whenever one of its processes starts (every driver's
    ``ray.init`` too), so a chmod of that dir does not hold; the guard, which Ray never
    touches, is what keeps other users out: they cannot traverse it. The guard is ``root``,
    or a short dir under /tmp when ``root`` is too long for unix sockets.
    """
    root = root.resolve()
    if len(str(root)) + 2 <= _MAX_TEMP_DIR_LEN:
        root.mkdir(parents=True, exist_ok=True)
        guard = root
    else:
        guard = Path(tempfile.mkdtemp(prefix="shray-", dir="/tmp"))
    os.chmod(guard, 0o700)
    temp = guard / "r"
    temp.mkdir(exist_ok=True)
    return temp


@dataclass(kw_only=True)
class RayHead:
    """A running embedded head. Use :meth:`start`; always :meth:`stop` (idempotent)."""

    process: subprocess.Popen[bytes]
    gcs_address: str  # host:port, what ray.init / a worker node joins
    dashboard_url: str  # http://host:port, the job API
    temp_dir: Path
    log_path: Path
    token: str
    stop_timeout_s: float = 15.0
    # What ``restart()`` needs: how it was started, on which ports.
    config: RayHeadConfig | None = None
    ports: list[int] = field(default_factory=list)
    restarted_at: float | None = None  # monotonic clock, when restart() had it ready

    @classmethod
    def start(cls, config: RayHeadConfig) -> RayHead:
        """Start a head and wait until it is ready; a failed start is retried (fresh ports).

        Ray gives its raylet a fixed 30 s to register with the GCS; on an overloaded machine
        that can run out once, so one retry is cheap insurance.
        """
        for attempt in range(1, config.start_attempts + 1):
            try:
                return cls._start_once(config)
            except RayHeadError as e:
                if attempt == config.start_attempts:
                    raise
                log.warning("ray head start %d failed, retrying: %s", attempt, str(e)[-300:])
        raise AssertionError("unreachable")

    def restart(self) -> None:
        """Start the head again (after it died or was killed) at the same address (GCS and
        dashboard ports), temp dir and Redis, and wait until it is ready. Stops what is left
        of the old one first."""
        if self.config is None:
            raise RayHeadError("this head was not started by RayHead.start; cannot restart it")
        for attempt in range(1, self.config.start_attempts + 1):
            self.stop()
            try:
                # The GCS and dashboard keep their ports (the address the service and any
                # worker node know); the raylet and agents get fresh ones, as on a new pod:
                # the restarted GCS, which remembers the old node, must not find a new
                # raylet at the old one's address (seen: registration timing out).
                ports = [*self.ports[:2], *free_ports(len(self.ports) - 2, self.config.host)]
                new = self._start_once(self.config, ports=ports, temp_dir=self.temp_dir)
            except RayHeadError as e:  # Ray's fixed 30 s for its raylet to register, as start()
                if attempt == self.config.start_attempts:
                    raise
                log.warning("ray head restart %d failed, retrying: %s", attempt, str(e)[-300:])
                continue
            self.process, self.log_path, self.ports = new.process, new.log_path, ports
            atexit.unregister(new.stop)
            self.restarted_at = time.monotonic()
            return

    @classmethod
    def _start_once(
        cls, config: RayHeadConfig, *, ports: list[int] | None = None, temp_dir: Path | None = None
    ) -> RayHead:
        token = ensure_token_env()
        temp_dir = temp_dir or _private_temp_dir(config.temp_root)
        host = config.host
        ports = list(ports or free_ports(9, host))
        gcs_port, dash_port, *p = ports
        cmd = [
            sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
            f"--node-ip-address={host}", f"--port={gcs_port}",
            "--include-dashboard=true", f"--dashboard-host={host}",
            f"--dashboard-port={dash_port}",
            f"--ray-client-server-port={p[0]}",
            f"--node-manager-port={p[1]}",
            f"--object-manager-port={p[2]}",
            f"--dashboard-agent-listen-port={p[3]}",
            f"--dashboard-agent-grpc-port={p[4]}",
            f"--runtime-env-agent-port={p[5]}",
            f"--metrics-export-port={p[6]}",
            f"--temp-dir={temp_dir}", "--disable-usage-stats",
        ]  # fmt: skip
        if config.num_cpus is not None:
            cmd.append(f"--num-cpus={config.num_cpus}")
        if config.num_gpus is not None:
            cmd.append(f"--num-gpus={config.num_gpus}")
        if config.redis_password:
            cmd.append(f"--redis-password={config.redis_password}")
        env = {
            # Ray gives its dashboard 60 s and the raylet ~15 s for the dashboard agent to come
            # up; an overloaded machine misses both (raylet "Timed out waiting for file").
            "RAY_DASHBOARD_STARTUP_TIMEOUT_S": "240",
            "RAY_agent_register_timeout_ms": "120000",
            **os.environ,
            **config.env,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": token,
            **_loopback_env(host),
            **_gcs_ft_env(config),
        }
        log_path = temp_dir / f"head-{gcs_port}-{int(time.time())}.log"
        with open(log_path, "wb") as log:
            # start_new_session: own process group, so stop() reaches raylet, GCS, dashboard.
            # The group's leader is launcher.head_guard, which stops the group if this process
            # dies without stopping it (SIGKILL, a crash): no Ray head outlives the service.
            guarded = [sys.executable, "-m", "launcher.head_guard", str(os.getpid()), "--", *cmd]
            proc = subprocess.Popen(
                guarded, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        head = cls(
            process=proc,
            gcs_address=f"{host}:{gcs_port}",
            dashboard_url=f"http://{host}:{dash_port}",
            temp_dir=temp_dir,
            log_path=log_path,
            token=token,
            stop_timeout_s=config.stop_timeout_s,
            config=config,
            ports=ports,
        )
        # Backstop: a service that exits without close() must not leave a Ray cluster behind.
        atexit.register(head.stop)
        try:
            head._wait_ready(config.ready_timeout_s)
        except BaseException:
            head.stop()
            raise
        return head

    def _log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def _wait_ready(self, timeout_s: float) -> None:
        """Poll until the job API answers (authenticated) and the head node is registered."""
        deadline = time.monotonic() + timeout_s
        headers = {"Authorization": f"Bearer {self.token}"}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RayHeadError(
                    f"ray head exited with {self.process.returncode}:\n{self._log_tail()}"
                )
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.get(f"{self.dashboard_url}/api/jobs/", headers=headers, timeout=2.0)
                nodes = httpx.get(
                    f"{self.dashboard_url}/api/v0/nodes", headers=headers, timeout=2.0
                )
                if (
                    r.status_code == 200
                    and nodes.status_code == 200
                    and nodes.json()["data"]["result"]["total"] > 0
                ):
                    return
            time.sleep(0.5)
        raise RayHeadError(f"ray head not ready after {timeout_s:.0f}s:\n{self._log_tail()}")

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        """Stop the head's whole process group: SIGTERM, then SIGKILL after the timeout."""
        pgid = self.process.pid  # leader of its own session/group (start_new_session)
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                self.process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                self.process.wait(timeout=10)
        # Children (raylet, gcs, workers) share the group; sweep any left after the leader.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
