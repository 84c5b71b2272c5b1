"""A private PostgreSQL for tests that stop and restart their database: ``pg_ctl`` on a free port.

``PgCluster.create(base)`` runs ``initdb`` (trust auth, no fsync) into a fresh directory and
``start()`` serves it on a free loopback port (its Unix socket in the same directory);
``stop()`` is a fast shutdown (``pg_ctl stop -m fast``: sessions are cut, as in a restart for
a minor upgrade), ``restart()`` both. ``destroy()`` stops it and removes the directory. The
server is PostgreSQL's own binaries from ``/usr/lib/postgresql/<n>/bin`` (or ``$PG_BIN``);
``available()`` says whether they are there (tests skip cleanly without them). As root the
cluster is created and run as the ``postgres`` user (``initdb`` refuses root), through
``runuser``. Stopping is by ``pg_ctl`` and the cluster's own pid file, never by name.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PgCluster", "available"]


def _bin_dir() -> Path | None:
    env = os.environ.get("PG_BIN")
    if env and (Path(env) / "pg_ctl").exists():
        return Path(env)
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    return Path(found[0]).parent if found else None


def _run_as() -> list[str]:
    """The prefix that runs a command as a non-root user when we are root."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        return ["__no_user__"]
    runuser = shutil.which("runuser")
    return [runuser, "-u", "postgres", "--"] if runuser else ["__no_user__"]


def available() -> str | None:
    """None when a cluster can be made here, else why not (for ``pytest.skip``)."""
    if _bin_dir() is None:
        return "no PostgreSQL server binaries (/usr/lib/postgresql/*/bin or $PG_BIN)"
    if _run_as() == ["__no_user__"]:
        return "running as root without a postgres user and runuser to run initdb"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgCluster:
    root: Path
    port: int
    bin: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def create(cls, base: str | None = None) -> PgCluster:
        bin_dir = _bin_dir()
        assert bin_dir is not None, available()
        # Not under pytest's tmp_path: its parents are root's 0700, unreadable for postgres.
        root = Path(tempfile.mkdtemp(prefix="shunter-pg-", dir=base))
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(root, pw.pw_uid, pw.pw_gid)
        cluster = cls(root=root, port=_free_port(), bin=bin_dir)
        cluster._pg("initdb", "-D", str(cluster.data), "-A", "trust", "-U", "postgres",
                    "--no-sync", "-E", "UTF8")  # fmt: skip
        return cluster

    def _pg(self, tool: str, *args: str) -> None:
        cmd = [*_run_as(), str(self.bin / tool), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            server_log = self.root / "server.log"
            log = server_log.read_text() if server_log.exists() else ""
            raise RuntimeError(f"{tool} failed: {done.stdout}{done.stderr}\n{log[-2000:]}")

    def start(self) -> None:
        opts = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._pg("pg_ctl", "-D", str(self.data), "-o", opts, "-l", str(self.root / "server.log"),
                 "-w", "-t", "60", "start")  # fmt: skip

    def stop(self) -> None:
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def destroy(self) -> None:
        if self.running():
            with contextlib.suppress(RuntimeError):
                self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
