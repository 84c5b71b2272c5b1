"""Ray worker nodes as separate ``ray start --block`` processes joining a head, for the
topology tests; optionally each in a mount namespace of its own with a private tmpfs over
its temp and staging paths (a node that cannot see any other node's files)."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

__all__ = ["alive_nodes", "join_node", "outward_ip", "stop_group"]


def stop_group(proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM the process group ``proc`` leads, SIGKILL it if it lingers."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def outward_ip() -> str:
    """This machine's address on its network (no packet is sent: UDP connect only routes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("10.255.255.255", 1))
        ip: str = s.getsockname()[0]
    if ip.startswith("127."):
        pytest.skip("no non-loopback interface for a second Ray node to join over")
    return ip


def join_node(
    head: Any,
    ip: str,
    *,
    cpus: int,
    log: Path,
    env: dict[str, str],
    private: Path | None = None,
    also_private: tuple[Path, ...] = (),
    resources: str | None = None,
) -> subprocess.Popen[bytes]:
    """Start a worker node on address ``ip`` joining ``head`` (a ``launcher.ray_head.RayHead``).

    Ray Train counts the workers that share an IP as one node (their local ranks), so nodes
    that stand for separate machines need addresses of their own: 127.0.0.2, 127.0.0.3, ...
    (all of 127/8 reaches this machine) when the head is on the outward address.

    With ``private``, the node runs in a new mount namespace (``unshare --mount``, root only)
    where a fresh tmpfs is mounted over ``private``; its Ray temp dir is ``private/ray`` and its
    ``TMPDIR`` ``private/tmp``; ``also_private`` paths get a tmpfs of their own too (e.g. the
    staging root of ``worker.staging``, a path the driver names on the head). Every node uses
    the same paths, each sees only its own files there, and this process sees what was there
    before (nothing of the nodes')."""
    from launcher.ray_head import free_ports

    ports = free_ports(6, ip)
    ray = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--block",
        f"--address={head.gcs_address}", f"--node-ip-address={ip}", f"--num-cpus={cpus}",
        f"--node-manager-port={ports[0]}", f"--object-manager-port={ports[1]}",
        f"--dashboard-agent-listen-port={ports[2]}",
        f"--dashboard-agent-grpc-port={ports[3]}",
        f"--runtime-env-agent-port={ports[4]}", f"--metrics-export-port={ports[5]}",
        "--disable-usage-stats",
    ]  # fmt: skip
    if resources:
        ray.append(f"--resources={resources}")
    node_env = {
        **os.environ,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": head.token,
        "RAY_agent_register_timeout_ms": "120000",
        **env,
    }
    cmd = ray
    if private is not None:
        # Ray's sockets: <temp>/session_<date>_<time>_<us>_<pid>/sockets/plasma_store, and a
        # unix socket path holds 107 bytes at most; keep room for the session name.
        if len(str(private / "ray")) > 40:
            raise ValueError(f"private root {private} is too long for Ray's socket paths")
        private.mkdir(parents=True, exist_ok=True)
        ray.append(f"--temp-dir={private / 'ray'}")
        node_env["TMPDIR"] = str(private / "tmp")
        mounts = ""
        for path in (private, *also_private):
            path.mkdir(parents=True, exist_ok=True)
            mounts += f"mount -t tmpfs -o mode=0700 shunter-node {shlex.quote(str(path))} && "
        script = (
            f"{mounts}mkdir {shlex.quote(str(private / 'ray'))} "
            f"{shlex.quote(str(private / 'tmp'))} && exec {shlex.join(ray)}"
        )
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=node_env, start_new_session=True
        )


def alive_nodes(head: Any) -> list[dict[str, Any]]:
    """The head's ALIVE nodes (Ray's state API)."""
    r = httpx.get(
        f"{head.dashboard_url}/api/v0/nodes",
        headers={"Authorization": f"Bearer {head.token}"},
        timeout=5,
    )
    out: list[dict[str, Any]] = r.json()["data"]["result"]["result"]
    return [n for n in out if n["state"] == "ALIVE"]
