"""API load benchmark, SQLite and PostgreSQL side by side: GET /v1/jobs/{id} under 100
keep-alive pollers, then submit.

    python bench/api_load.py [--dbs sqlite,postgres] [--jobs 10000] [--queued 0.35]
                             [--clients 100] [--seconds 20] [--workers 2]
                             [--submit-clients 10] [--submit-seconds 10] [--paced 0.1]
                             [--pg-url URL] [--json out.json]

1. Per database, a fresh one (SQLite: a temp ``SHUNTER_HOME``; PostgreSQL: a new database on
   ``--pg-url``, default ``$SHUNTER_TEST_POSTGRES_URL``, dropped at the end) is migrated and
   seeded with ``--jobs`` jobs in bulk: ``--queued`` of them queued (default 35%; each with
   the position and reason a scheduler tick stores), the rest spread over starting, running,
   cancelling, succeeded, failed and cancelled. Plus the bootstrap admin token.
2. The real server starts as a subprocess (``shunter serve``, uvicorn with uvloop/httptools,
   ``--workers`` processes, in-memory launcher, no scheduler) on a free port.
3. GET load: ``wrk`` (``apt-get install wrk``; C, ``-c --clients`` keep-alive connections,
   a Lua script sets ``Authorization`` and cycles through the seeded job ids) when it is
   installed; it costs the shared CPU a fraction of what any Python client does. Without
   it (or with ``--python-client``) our own generator runs in a separate process:
   ``--clients`` asyncio tasks, each with its own keep-alive connection. Reported:
   requests/s, p50/p90/p99/max latency, errors, server CPU per request.
4. Submit: ``--submit-clients`` tasks POST a valid spec for ``--submit-seconds`` (201 expected).
5. A table of both databases, and the ratios against the issue's baseline (main 187a972,
   3,000 queued: SQLite 96 req/s p99 2.6 s; PostgreSQL 110 req/s p99 3.0 s) and the target
   (>= 1,000 req/s and p99 <= 50 ms for GET; submit p99 <= 200 ms).

The generator and the server share the machine: on a busy 2-core box the figures are a lower
bound of what the server alone would do (the load average is printed with them).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SPEC: dict[str, Any] = {
    "name": "bench",
    "model": {
        "from_scratch": True,
        "task": "sequence-classification",
        "num_labels": 2,
        "tokenizer": "models/all-MiniLM-L6-v2",  # bundled, linked into the data root
        "config_overrides": {
            "model_type": "bert",
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
    },
    "data": {
        "train": {"path": "train.tsv", "format": "csv", "delimiter": "\t"},
        "text_field": "sentence",
        "label_field": "label",
    },
    "training": {"max_steps": 20, "logging_steps": 1},
    "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
}


# --- seeding ------------------------------------------------------------------------------


# Everything but "queued" (the rest of the mix), in proportion.
_OTHER_STATES = {
    "succeeded": 40,
    "failed": 15,
    "cancelled": 10,
    "running": 25,
    "starting": 5,
    "cancelling": 5,
}
_BASELINE = {"sqlite": (96.0, 2600.0), "postgres": (110.0, 3000.0)}  # req/s, p99 ms
SUBMIT_P99_MS = 200.0


def settings_for(home: Path, db_url: str) -> Any:
    from service.settings import Settings

    data = home / "data"
    return Settings(home=home, data_roots=[data], database_url=db_url)


def seed(home: Path, db_url: str, n_jobs: int, queued: float) -> tuple[str, list[str]]:
    """Migrate, create the admin token, insert ``n_jobs`` jobs; return (token, job ids)."""
    from service.accounts.auth import bootstrap_admin
    from service.db.engine import Database
    from service.db.migrate import upgrade
    from service.db.tables import Event, Job
    from service.home import seed_home
    from service.jobs.admission import validate_spec
    from service.jobs.submit import new_job_id

    settings = settings_for(home, db_url)
    seed_home(settings)  # links the bundled MiniLM the spec's tokenizer names
    (settings.data_roots[0] / "train.tsv").write_text("sentence\tlabel\ngood\t1\nbad\t0\n")
    upgrade(settings.database_url)
    db = Database(settings.database_url)
    token = bootstrap_admin(db, token_path=settings.admin_token_path)
    assert token is not None
    resolved = validate_spec(SPEC, data_roots=settings.data_roots).model_dump(mode="json")
    rng = random.Random(0)
    others = [s for s, w in _OTHER_STATES.items() for _ in range(w)]
    n_queued = int(n_jobs * queued)
    statuses = ["queued"] * n_queued + [rng.choice(others) for _ in range(n_jobs - n_queued)]
    rng.shuffle(statuses)
    ids: list[str] = []
    batch: list[Any] = []
    events: list[Any] = []
    position = 0
    for i, status in enumerate(statuses):
        job_id = new_job_id()
        ids.append(job_id)
        spec = {
            **resolved,
            "training": {**resolved["training"], "output_dir": f"{settings.storage}/{job_id}"},
        }
        started = status not in ("queued",)
        position += status == "queued"
        batch.append(
            Job(
                id=job_id,
                team="default",
                name=f"bench-{i}",
                status=status,
                priority="normal",
                spec=spec,
                created_by="bench",
                num_workers=1,
                cpus_per_worker=1.0,
                gpus_per_worker=0.0,
                attempt=1 if started else 0,
                progress_step=rng.randint(0, 20) if started else None,
                progress_total_steps=20,
                latest_metrics={"loss": rng.random(), "step": 20} if started else None,
                # What a scheduler tick stores for a queued job.
                queue_position=position if status == "queued" else None,
                pending_reason="waiting for resources: needs 1 x (1 CPU, 0 GPU) at once"
                if status == "queued"
                else None,
            )
        )
        events.append(Event(job_id=job_id, to_status="queued", type="submitted", message=""))
    for chunk in range(0, len(batch), 2000):
        db.write(lambda s, b=batch[chunk : chunk + 2000]: s.add_all(b))
    for chunk in range(0, len(events), 2000):
        db.write(lambda s, b=events[chunk : chunk + 2000]: s.add_all(b))
    db.dispose()
    return token, ids


def create_pg_database(base_url: str) -> tuple[str, str]:
    """A fresh database next to ``base_url``'s; returns (its URL, its name)."""
    import sqlalchemy as sa

    name = f"shunter_bench_{os.getpid()}_{int(time.time())}"
    engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return str(sa.engine.make_url(base_url).set(database=name)), name


def drop_pg_database(base_url: str, name: str) -> None:
    import sqlalchemy as sa

    engine = sa.create_engine(base_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


# --- server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(home: Path, db_url: str, port: int, workers: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SHUNTER_HOME": str(home),
        "SHUNTER_DATABASE_URL": db_url,
        "SHUNTER_MIGRATE_ON_START": "false",
        "SHUNTER_HUB_ACCESS": "off",
        "SHUNTER_LAUNCHER": "memory",
        "SHUNTER_RUN_SCHEDULER": "false",
        "SHUNTER_RATE_LIMIT_PER_MINUTE": "0",  # measure the API, not the per-token limiter
        "SHUNTER_DATA_ROOTS": str(home / "data"),
        "SHUNTER_PORT": str(port),
        "SHUNTER_HOST": "127.0.0.1",
    }
    cmd = [sys.executable, "-m", "shunter.cli", "serve", "--workers", str(workers)]
    proc = subprocess.Popen(cmd, env=env, cwd=REPO, start_new_session=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if s.recv(64).startswith(b"HTTP/1.1 200"):
                    return proc
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become healthy in 60 s")


def server_cpu_seconds(proc: subprocess.Popen[bytes]) -> float:
    """User+system CPU seconds used so far by the server and its worker processes.

    CPU per request is the figure that survives a busy machine: wall-clock latency on a
    shared 2-core box mostly measures the neighbours.
    """
    try:
        import psutil
    except ImportError:
        return float("nan")
    root = psutil.Process(proc.pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            continue
    return total


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)  # our own process group (start_new_session)
        proc.wait(20)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)


# --- load generator -----------------------------------------------------------------------


class Conn:
    """One keep-alive HTTP/1.1 connection; just enough protocol for our own server."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.auth = f"Authorization: Bearer {token}\r\n".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n".encode() + self.auth
        if body:
            head += b"Content-Type: application/json\r\n"
        head += f"Content-Length: {len(body)}\r\n\r\n".encode()
        self.writer.write(head + body)
        status_line = await self.reader.readline()
        if not status_line:
            raise ConnectionError("server closed the connection")
        status = int(status_line.split()[1])
        length = 0
        close = False
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
            elif name.lower() == "connection" and value.strip().lower() == "close":
                close = True
        payload = await self.reader.readexactly(length)
        if close:
            await self.close()
        return status, payload

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


async def _client(
    port: int,
    token: str,
    stop_at: float,
    make: Any,
    expect: int,
    lat: list[float],
    errors: list[str],
    interval: float,
) -> None:
    conn = Conn(port, token)
    # Paced clients start spread over one interval, then poll every ``interval`` seconds.
    next_at = time.perf_counter() + random.random() * interval
    while time.perf_counter() < stop_at:
        if interval > 0:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            next_at += interval
        method, path, body = make()
        t0 = time.perf_counter()
        try:
            status, payload = await conn.request(method, path, body)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as exc:
            errors.append(type(exc).__name__)
            await conn.close()
            continue
        lat.append(time.perf_counter() - t0)
        if status != expect:
            errors.append(f"{status}: {payload[:120]!r}")
    await conn.close()


def _run_load(
    port: int,
    token: str,
    kind: str,
    ids: list[str],
    clients: int,
    seconds: float,
    interval: float,
    queue: Any,
) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    rng = random.Random(1)
    spec = json.dumps(SPEC).encode()
    if kind == "get":

        def make() -> tuple[str, str, bytes]:
            return "GET", f"/v1/jobs/{rng.choice(ids)}", b""

        expect = 200
    else:

        def make() -> tuple[str, str, bytes]:
            return "POST", "/v1/jobs", spec

        expect = 201
    lat: list[float] = []
    errors: list[str] = []

    async def main() -> float:
        start = time.perf_counter()
        stop_at = start + seconds
        await asyncio.gather(
            *(
                _client(port, token, stop_at, make, expect, lat, errors, interval)
                for _ in range(clients)
            )
        )
        return time.perf_counter() - start

    elapsed = asyncio.run(main())
    queue.put({"latencies": lat, "errors": errors, "elapsed": elapsed})


def load(
    port: int,
    token: str,
    kind: str,
    ids: list[str],
    clients: int,
    seconds: float,
    interval: float = 0.0,
) -> dict[str, Any]:
    """Run the generator in its own process (so it does not share the GIL with anything).

    ``interval`` 0: closed loop (each client sends its next request as soon as the last one
    is answered: the server's saturation throughput). > 0: each client polls once per
    ``interval`` seconds (offered load = clients / interval requests/s).
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(
        target=_run_load,
        args=(port, token, kind, ids, clients, seconds, interval, queue),
        daemon=True,
    )
    proc.start()
    try:
        out = queue.get(timeout=seconds + 120)
    finally:
        proc.join(30)
        if proc.is_alive():
            proc.terminate()
    lat = sorted(out["latencies"])

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {
        "kind": kind,
        "clients": clients,
        "interval_s": interval,
        "seconds": round(out["elapsed"], 2),
        "requests": len(lat),
        "rps": round(len(lat) / out["elapsed"], 1),
        "p50_ms": round(pct(0.50), 2),
        "p90_ms": round(pct(0.90), 2),
        "p99_ms": round(pct(0.99), 2),
        "max_ms": round(lat[-1] * 1000, 2) if lat else None,
        "mean_ms": round(statistics.fmean(lat) * 1000, 2) if lat else None,
        "errors": len(out["errors"]),
        "error_samples": sorted(set(out["errors"]))[:5],
    }


# --- wrk (GET phase) ----------------------------------------------------------------------

WRK = "/usr/bin/wrk"
TARGET_RPS = 1000.0
TARGET_P99_MS = 50.0

_WRK_LUA = """
local ids = {}
for line in io.lines("%(ids)s") do ids[#ids + 1] = line end
local counter = 0
local auth = "Bearer %(token)s"
-- Each connection's thread starts at its own offset so they do not poll in lockstep.
function init(args) counter = math.random(#ids) end
function request()
  counter = counter %% #ids + 1
  return wrk.format("GET", "/v1/jobs/" .. ids[counter], {["Authorization"] = auth})
end
%(delay)s"""

_UNIT_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if m is None:
        raise ValueError(f"wrk latency {text!r}")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_wrk(out: str) -> dict[str, Any]:
    """wrk's text report -> requests, rps, percentiles (ms), errors (socket + non-2xx)."""
    pct = {p: _ms(v) for p, v in re.findall(r"^\s+(50|75|90|99)%\s+(\S+)\s*$", out, re.M)}
    m = re.search(r"(\d+) requests in ([\d.]+)(\w+),", out)
    if m is None or "99" not in pct:
        raise RuntimeError(f"cannot parse wrk output:\n{out}")
    requests = int(m.group(1))
    seconds = _ms(m.group(2) + m.group(3)) / 1000
    socket_errors = 0
    s = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if s:
        socket_errors = sum(int(x) for x in s.groups())
    n = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    non2xx = int(n.group(1)) if n else 0
    maxm = re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out)
    return {
        "requests": requests,
        "seconds": round(seconds, 2),
        "rps": round(requests / seconds, 1),
        "p50_ms": round(pct["50"], 2),
        "p90_ms": round(pct["90"], 2),
        "p99_ms": round(pct["99"], 2),
        "max_ms": round(_ms(maxm.group(1)), 2) if maxm else None,
        "errors": socket_errors + non2xx,
        "socket_errors": socket_errors,
        "non_2xx": non2xx,
    }


# Paced: each connection waits a think time, uniform in [0.5, 1.5] x interval (mean: the
# interval; the spread keeps 100 connections from polling in lockstep bursts).
_WRK_DELAY = """
function delay() return math.random(%(lo)d, %(hi)d) end
"""


def load_wrk(
    port: int,
    token: str,
    ids: list[str],
    clients: int,
    seconds: float,
    tmp: Path,
    interval: float = 0.0,
) -> dict[str, Any]:
    """GET load with wrk: ``clients`` connections over 2 threads; closed loop, or with
    ``interval`` > 0 each connection polls, waits about ``interval`` s, polls again."""
    ids_file = tmp / "ids.txt"
    ids_file.write_text("\n".join(ids) + "\n")
    script = tmp / "get.lua"
    ms = interval * 1000
    delay = _WRK_DELAY % {"lo": ms * 0.5, "hi": ms * 1.5} if interval > 0 else ""
    script.write_text(_WRK_LUA % {"ids": ids_file, "token": token, "delay": delay})
    cmd = [
        WRK,
        "-t",
        "2",
        "-c",
        str(clients),
        "-d",
        f"{seconds:g}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(script),
        f"http://127.0.0.1:{port}",
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return {
        "kind": "get",
        "generator": "wrk",
        "clients": clients,
        "interval_s": interval,
        **parse_wrk(out),
    }


def run_one(args: argparse.Namespace, db: str, tmp: Path) -> dict[str, Any]:
    """Seed one database, start the server on it, run the phases; the results."""
    home = tmp / db / "home"
    pg_name = None
    if db == "sqlite":
        db_url = f"sqlite:///{home / 'shunter.db'}"
    else:
        db_url, pg_name = create_pg_database(args.pg_url)
    try:
        t0 = time.perf_counter()
        token, ids = seed(home, db_url, args.jobs, args.queued)
        print(f"[{db}] seeded {len(ids)} jobs in {time.perf_counter() - t0:.1f} s", flush=True)
        port = free_port()
        server = start_server(home, db_url, port, args.workers)
        try:
            return _phases(args, db, server, port, token, ids, tmp)
        finally:
            stop_server(server)
    finally:
        if pg_name is not None:
            drop_pg_database(args.pg_url, pg_name)


def _phases(
    args: argparse.Namespace,
    db: str,
    server: subprocess.Popen[bytes],
    port: int,
    token: str,
    ids: list[str],
    tmp: Path,
) -> dict[str, Any]:
    use_wrk = not args.python_client and shutil.which(WRK) is not None
    if not use_wrk:
        why = "--python-client" if args.python_client else f"{WRK} not installed"
        print(f"[{db}] GET phase: Python load generator ({why})", flush=True)
    load(port, token, "get", ids, 10, 2.0)  # warm-up: connections, caches, imports
    phases = [("get", args.clients, args.seconds, 0.0)]
    if args.paced > 0:
        phases.append(("get_paced", args.clients, args.seconds, args.paced))
    phases.append(("submit", args.submit_clients, args.submit_seconds, 0.0))
    out: dict[str, Any] = {"db": db}
    for name, clients, seconds, interval in phases:
        cpu0 = server_cpu_seconds(server)
        if name != "submit" and use_wrk:
            r = load_wrk(port, token, ids, clients, seconds, tmp, interval)
        else:
            kind = "post" if name == "submit" else "get"
            r = load(port, token, kind, ids, clients, seconds, interval)
            r["generator"] = "python"
        cpu = server_cpu_seconds(server) - cpu0
        r["server_cpu_ms_per_request"] = round(cpu * 1000 / max(r["requests"], 1), 3)
        r["load_average_1m"] = round(os.getloadavg()[0], 1)
        print(f"[{db}] {name}: {json.dumps(r)}", flush=True)
        out[name] = r
    return out


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The side-by-side table and the ratios against the baseline and the target."""
    print()
    print(
        f"{args.jobs} jobs ({args.queued:.0%} queued), {args.clients} keep-alive GET pollers, "
        f"{args.workers} uvicorn workers, {os.cpu_count()} CPUs, "
        "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())
    )
    head = f"{'':34}" + "".join(f"{r['db']:>28}" for r in results)
    print(head)

    def row(label: str, fn: Any) -> None:
        print(f"{label:34}" + "".join(f" {fn(r):>27}" for r in results))

    row("GET req/s", lambda r: r["get"]["rps"])
    row("GET p50 / p99 ms", lambda r: f"{r['get']['p50_ms']} / {r['get']['p99_ms']}")
    row("GET errors", lambda r: r["get"]["errors"])
    row("GET server CPU ms/request", lambda r: r["get"]["server_cpu_ms_per_request"])
    row(
        "GET vs baseline (rate, p99)",
        lambda r: (
            f"{r['get']['rps'] / _BASELINE[r['db']][0]:.1f}x, "
            f"{_BASELINE[r['db']][1] / max(r['get']['p99_ms'], 0.01):.0f}x lower"
        ),
    )
    row(
        "GET vs target (>=1000/s, p99<=50)",
        lambda r: (
            "MET"
            if r["get"]["rps"] >= TARGET_RPS
            and r["get"]["p99_ms"] <= TARGET_P99_MS
            and r["get"]["errors"] == 0
            else f"NOT met ({r['get']['rps'] / TARGET_RPS:.2f}x, "
            f"{r['get']['p99_ms'] / TARGET_P99_MS:.2f}x)"
        ),
    )
    if args.paced > 0:
        row("GET paced req/s", lambda r: r["get_paced"]["rps"])
        row(
            "GET paced p50 / p99 ms",
            lambda r: f"{r['get_paced']['p50_ms']} / {r['get_paced']['p99_ms']}",
        )
    row("submit jobs/s", lambda r: r["submit"]["rps"])
    row("submit p50 / p99 ms", lambda r: f"{r['submit']['p50_ms']} / {r['submit']['p99_ms']}")
    row("submit errors", lambda r: r["submit"]["errors"])
    row(
        "submit vs target (p99<=200)",
        lambda r: (
            "MET"
            if r["submit"]["p99_ms"] <= SUBMIT_P99_MS and r["submit"]["errors"] == 0
            else f"NOT met ({r['submit']['p99_ms'] / SUBMIT_P99_MS:.2f}x)"
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dbs", default="sqlite,postgres", help="comma-separated: sqlite,postgres")
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--queued", type=float, default=0.35, help="share of the jobs queued")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument(
        "--paced",
        type=float,
        default=0.0,
        help="also a paced GET run: each client polls every PACED s (0 = skip)",
    )
    ap.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    ap.add_argument("--submit-clients", type=int, default=10)
    ap.add_argument("--submit-seconds", type=float, default=10.0)
    ap.add_argument(
        "--pg-url",
        default=os.environ.get(
            "SHUNTER_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
        ),
        help="a PostgreSQL URL whose server may create a bench database",
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument(
        "--python-client", action="store_true", help="GET phase on the Python client, not wrk"
    )
    args = ap.parse_args()
    # A SIGTERM (e.g. from `timeout`) unwinds through the finally blocks: servers stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    dbs = [d.strip() for d in args.dbs.split(",") if d.strip()]
    results = []
    with tempfile.TemporaryDirectory(prefix="shunter-bench-") as tmp:
        for db in dbs:
            if db not in _BASELINE:
                ap.error(f"--dbs: unknown database {db!r}; use sqlite and/or postgres")
            results.append(run_one(args, db, Path(tmp)))
    report(results, args)
    if args.json:
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=2
            )
        )


if __name__ == "__main__":
    main()
