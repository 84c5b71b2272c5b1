"""Finding (or starting) the zygote of a template, and asking it for a child.

A zygote is shared by every process of this user on this node whose template key is the
same: the kind, the modules, the interpreter, our source files (path, size, mtime), sys.path
and the environment minus ``PER_JOB_ENV``. The environment is part of the key because
libraries read some variables once, at import (``HF_HOME``, ``HF_HUB_OFFLINE``,
``OMP_NUM_THREADS`` ...): a child may only come from a template that imported with the
values its requester has. ``PER_JOB_ENV`` are the variables that differ between the jobs and
ranks of one cluster (what identifies an attempt, the torchrun variables, the devices) and
that no library reads at import, and so are our own ``SHUNTER_*`` variables (one service's
URL differs from another's); the child gets them, with the rest, from its requester.

Files live in ``/tmp/shz-<uid>/`` (mode 0700; a unix socket path holds 107 bytes at most):
``<kind>-<key>.sock``, ``.lock`` (one starter at a time), ``.log`` (the zygote's output),
``.failed`` (why this template could not start: later requesters do not try again, and run
in-process at once, instead of paying the imports once more for nothing).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from shunter import wire
from worker.file_lock import flocked
from worker.warm.protocol import ProtocolError, recv_json, send_json

__all__ = [
    "PER_JOB_ENV",
    "Child",
    "Exit",
    "WarmUnavailable",
    "find_raylet",
    "spawn",
    "template_key",
]

PER_JOB_ENV = frozenset(
    {
        *wire.PER_ATTEMPT_ENV,
        "RAY_JOB_ID",
        "RAY_JOB_CONFIG_JSON_ENV_VAR",  # a driver's job config: names the attempt
        "MASTER_ADDR",
        "MASTER_PORT",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "CUDA_VISIBLE_DEVICES",  # read when CUDA initialises, which a template never does
    }
)
_SOURCE_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = ("shunter", "service", "worker", "trainer_core")
_BOOT = (
    "import sys; sys.path[:0] = [sys.argv[3]]; "
    "from worker.warm.zygote import main; main(sys.argv[1:3])"
)


class WarmUnavailable(RuntimeError):
    """No child could be had (the zygote did not start, or refused): run in-process instead."""


class _TemplateFailed(WarmUnavailable):
    """The template itself cannot start (an import failed, or touched CUDA): it never will."""


@dataclass(frozen=True, kw_only=True)
class Exit:
    """How a child ended: its exit code, or the signal that killed it (None: not known)."""

    code: int | None = None
    signal: int | None = None
    unknown: str = ""

    def __str__(self) -> str:
        if self.signal is not None:
            return f"killed by signal {self.signal} ({signal.Signals(self.signal).name})"
        if self.code is not None:
            return f"exit code {self.code}"
        return f"unknown ({self.unknown})"


@dataclass(kw_only=True)
class Child:
    """A forked child: ``channel`` reaches it, ``control`` reaches the zygote that forked it.
    Keep ``control`` open while the child should live: closing it (or dying) kills the child."""

    pid: int
    channel: socket.socket
    control: socket.socket

    def wait(self, timeout_s: float = 10.0) -> Exit:
        """How the child ended, once the zygote has reaped it (bounded wait)."""
        self.control.settimeout(timeout_s)
        try:
            doc, _ = recv_json(self.control)
        except (OSError, ProtocolError) as e:
            return Exit(unknown=f"{type(e).__name__}: {e}")
        if "signal" in doc:
            return Exit(signal=int(doc["signal"]))
        return Exit(code=int(doc["exit"]))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        self.channel.close()
        self.control.close()


def find_raylet() -> int | None:
    """This node's raylet: named in a Ray worker's environment, else the nearest ancestor
    process called ``raylet`` (a Ray job's entrypoint runs under its job supervisor)."""
    pid = os.environ.get("RAY_RAYLET_PID", "")
    if pid.isdigit():
        return int(pid)
    pid_ = os.getppid()
    for _ in range(6):
        try:
            comm = Path(f"/proc/{pid_}/comm").read_text().strip()
            stat = Path(f"/proc/{pid_}/stat").read_text()
        except OSError:
            return None
        if comm == "raylet":
            return pid_
        pid_ = int(stat[stat.rindex(")") + 2 :].split()[1])
        if pid_ <= 1:
            return None
    return None


def _base_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` without what may differ between the requesters of one template: ``PER_JOB_ENV``
    and our own ``SHUNTER_*`` variables (the service's URL, the attempt's identity, tuning),
    which our modules read when they run, never at import, and libraries never read."""
    return {k: v for k, v in env.items() if k not in PER_JOB_ENV and not k.startswith("SHUNTER_")}


@cache
def _sources_digest() -> str:
    h = hashlib.sha256()
    for package in _PACKAGES:
        for path in sorted((_SOURCE_ROOT / package).rglob("*.py")):
            st = path.stat()
            h.update(f"{path}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def template_key(kind: str, modules: list[str], env: dict[str, str], path: list[str]) -> str:
    doc = [kind, modules, sys.executable, sys.version, _sources_digest(), path, _base_env(env)]
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]


def _home() -> Path:
    home = Path(f"/tmp/shz-{os.getuid()}")
    home.mkdir(mode=0o700, exist_ok=True)
    st = home.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise WarmUnavailable(f"{home} is not this user's private directory")
    return home


def _connect(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(str(path))
    except OSError:
        sock.close()
        return None
    return sock


def _tidy(home: Path, max_age_s: float = 86400.0) -> None:
    """Forget templates unused for a day (their zygotes are long gone): lock files, failure
    markers and logs of keys that no longer match anything would otherwise pile up."""
    now = time.time()
    for lock in home.glob("*.lock"):
        with contextlib.suppress(OSError):
            if now - lock.stat().st_mtime > max_age_s and not lock.with_suffix(".sock").exists():
                for suffix in (".failed", ".log", ".lock"):
                    lock.with_suffix(suffix).unlink(missing_ok=True)


def _start(
    sock_path: Path, *, modules: list[str], env: dict[str, str], path: list[str],
    watch_pid: int | None, idle_s: float, timeout_s: float,
) -> None:  # fmt: skip
    """Start the zygote and wait until it listens (or says why it cannot)."""
    cfg = {
        "socket": str(sock_path),
        "modules": modules,
        "path": path,
        "watch_pid": watch_pid,
        "idle_s": idle_s,
    }
    _tidy(sock_path.parent)
    r, w = os.pipe()
    try:
        with open(sock_path.with_suffix(".log"), "w") as log:
            first = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps(cfg), str(w), str(_SOURCE_ROOT)],
                env=_base_env(env),
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(w,),
                start_new_session=True,
            )
        os.close(w)
        w = -1
        first.wait()  # it forks the zygote and exits at once
        said = b""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            if not select.select([r], [], [], left)[0]:
                continue
            chunk = os.read(r, 4096)
            if not chunk:
                break
            said += chunk
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    if said != b"ok":
        text = said.decode(errors="replace") or "no answer"
        kind = _TemplateFailed if said.startswith(b"error:") else WarmUnavailable
        raise kind(f"the zygote did not start: {text} (log: {sock_path.with_suffix('.log')})")


def _zygote(
    kind: str, modules: list[str], env: dict[str, str], path: list[str], *,
    watch_pid: int | None, idle_s: float, timeout_s: float,
) -> socket.socket:  # fmt: skip
    """A control connection to the template's zygote, started if none is listening."""
    name = f"{kind}-{template_key(kind, modules, env, path)}"
    home = _home()
    sock_path = home / f"{name}.sock"
    failed = home / f"{name}.failed"
    sock = _connect(sock_path)
    if sock is not None:
        return sock
    with flocked(home / f"{name}.lock", timeout_s, timed_out=WarmUnavailable):
        sock = _connect(sock_path)  # another starter may have finished meanwhile
        if sock is None:
            if failed.exists():  # this template cannot start: don't pay its imports each time
                raise WarmUnavailable(failed.read_text())
            try:
                _start(sock_path, modules=modules, env=env, path=path, watch_pid=watch_pid,
                       idle_s=idle_s, timeout_s=timeout_s)  # fmt: skip
            except _TemplateFailed as e:
                failed.write_text(str(e))
                raise
            sock = _connect(sock_path)
    if sock is None:
        raise WarmUnavailable(f"the zygote at {sock_path} started but does not answer")
    return sock


def spawn(
    kind: str,
    target: str,
    *,
    modules: list[str],
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    watch_pid: int | None = None,
    idle_s: float = 900.0,
    timeout_s: float = 300.0,
    stdout: int = 1,
    stderr: int = 2,
) -> Child:
    """A fresh child of ``kind``'s template running ``target`` (``"module:function"``, called
    with the child's end of the channel) with this process's environment (or ``env``), cwd,
    sys.path, argv and stdout/stderr descriptors. Raises ``WarmUnavailable`` when there is no
    child to be had; one retry covers a zygote that was exiting (idle) as we connected."""
    env = dict(os.environ if env is None else env)
    path = list(sys.path)  # as it is: entries may be path hooks, not directories
    request = {
        "op": "spawn",
        "target": target,
        "env": env,
        "cwd": cwd or os.getcwd(),
        "path": path,
        "argv": sys.argv,
    }
    for attempt in (1, 2):
        try:
            control = _zygote(kind, modules, env, path, watch_pid=watch_pid, idle_s=idle_s,
                              timeout_s=timeout_s)  # fmt: skip
        except OSError as e:  # no private /tmp directory, no process to be had ...
            raise WarmUnavailable(f"no zygote: {type(e).__name__}: {e}") from e
        mine, theirs = socket.socketpair()
        try:
            send_json(control, request, [theirs.fileno(), stdout, stderr])
            control.settimeout(timeout_s)
            doc, _ = recv_json(control)
            control.settimeout(None)
        except (OSError, ProtocolError) as e:
            control.close()
            mine.close()
            if attempt == 2:
                raise WarmUnavailable(f"the zygote did not fork a child: {e}") from e
            continue
        finally:
            theirs.close()
        return Child(pid=int(doc["pid"]), channel=mine, control=control)
    raise AssertionError("unreachable")
