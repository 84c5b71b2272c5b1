"""Start-up time of small jobs (issue #22): where the seconds between submit and step 1 go.

What the outside check runs: a fresh embedded server (uvicorn in this process with the default
scheduler tick, SQLite, the real RayLauncher on its own Ray head on free ports, stopped by pid
at the end), three tiny 2-worker DDP jobs in a row (a 2-layer hidden-64 Llama built from a
config, 8 steps, a loss point every step), and the same training under ``torchrun`` as the
floor. Each job is submitted once the cluster is idle again. Per job it prints the seconds from
submit to each phase:

    claimed      the scheduler claimed it (event ``claimed``)
    launched     the launcher handed it to Ray (phase event; absent before #22 landed)
    running      the driver reported ``running`` (its Ray job supervisor and process are up)
    workers_up   rank 0 entered the training function (phase event, else its log line)
    model_built  rank 0 built model, data and engine (phase event; absent before #22)
    first_step   the first loss point
    succeeded    the job's ``succeeded`` event

and the whole job (submit -> ``succeeded`` seen by polling every 0.1 s) against torchrun's whole
run. Runs alternate: each job of ours is followed by one ``torchrun`` run, so both sides see
the same load; torchrun's figures are the medians of those runs. The first job is the cold one
(first after the server started); the medians are over the others, the warm jobs.

    python bench/startup.py [--jobs 3] [--steps 8] [--json out.json]
    python bench/startup.py --quick     # 2 jobs of 2 steps: a smoke run
    python bench/startup.py --burst 50  # then 50 tiny 1-worker jobs submitted at once
    python bench/startup.py --cold      # without warm processes (the in-process path)
    python bench/startup.py --load      # then again with a second training job running
    python bench/startup.py --trace     # and where each job's start went (below)
    python bench/startup.py --controller actor   # Ray Train's controller as its own actor
    python bench/startup.py --sync-actor first   # Ray Train's start order (sync actor first)

``--load`` (issue #33 item 3): after the idle measurement, a second 2-worker training job
(``torchrun --nproc-per-node 2`` of the same tiny model, as many steps as it takes, restarted
if it ends) runs on the machine while ``--jobs`` more warm jobs alternate with torchrun runs;
both ratios are printed, idle and loaded, each against the torchrun runs of the same phase.

``--trace`` sets ``SHUNTER_STARTUP_TRACE=1`` on the head (``worker.startup_trace``) and prints,
per job, seconds from submit to: each Ray process of the job (asked for / ready, from
``ray.util.state``: the job supervisor, the driver, the Train controller when it is an actor,
the synchronization actor, one Ray Train worker per rank), the driver's ``fit()``, rank 0's
training process, and its set-up steps (process group, tokenizer, model, data, engine).

``--cold`` turns warm processes off for the server's Ray head (``SHUNTER_WARM_WORKERS=0``,
``SHUNTER_WARM_DRIVERS=0``, ``worker.warm``): every driver and training function runs in its
Ray process and imports its libraries itself, as before warm processes; a before/after of
that change on one tree and one machine.

``--burst N`` (item 4, small-job throughput): after the jobs above, N 1-worker jobs of the same
training are submitted at once on the same server; it waits for all of them, checks every one
succeeded, and reports jobs per minute against N 1-process ``torchrun`` runs one after
another (the floor: what a user with a grabbed node does by hand).

Numbers depend heavily on load: on a shared 2-core machine they are inflated; say so.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from overhead import TEXT, job_spec, run_torchrun  # noqa: E402  (the same job and floor)

from worker import startup_trace  # noqa: E402

PHASES = ("claimed", "launched", "running", "workers_up", "model_built", "first_step", "succeeded")
_WORKER_LINE = "shunter: rank 0 entered the training function at "


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def phase_times(
    t0: float, events: Iterable[dict[str, Any]], loss_times: Iterable[float], log_text: str
) -> dict[str, float | None]:
    """Seconds from submit (``t0``, unix time) to each of ``PHASES`` (None: not seen).

    ``events`` as ``GET /v1/jobs/{id}/events`` lists them: a ``phase`` event's message starts
    with the phase's name; ``claimed``, ``running`` and ``succeeded`` are status events too.
    Pure: unit-tested without a server (tests/bench).
    """
    seen: dict[str, float] = {}
    for e in events:
        name = e["type"]
        if name == "phase":
            name = str(e.get("message") or "").split(":", 1)[0].strip()
        if name in PHASES and name not in seen:
            seen[name] = _ts(e["time"]) - t0
    losses = sorted(loss_times)
    if losses:
        seen.setdefault("first_step", losses[0] - t0)
    if "workers_up" not in seen:  # before the phase events: rank 0's own log line
        for line in log_text.splitlines():
            if _WORKER_LINE in line:
                stamp = line.split(_WORKER_LINE, 1)[1].split(";", 1)[0]
                seen["workers_up"] = float(stamp) - t0
                break
    return {p: seen.get(p) for p in PHASES}


class _Server:
    """The API in this process on a free port, on its own embedded Ray head."""

    def __init__(self, tmp: Path, tokenizer: str) -> None:
        import uvicorn

        from launcher.ray_launcher import start_embedded
        from service.app import create_app
        from service.settings import Settings

        self.ray_dir = Path(tempfile.mkdtemp(prefix="shray-s-", dir="/tmp"))
        self.launcher = start_embedded(self.ray_dir)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        # Default scheduler tick and lease: the outside check runs a plain `shunter serve`.
        settings = Settings(
            home=tmp / "home", data_roots=[tmp, Path(tokenizer)], host="127.0.0.1", port=port,
            auth_cache_seconds=0,
        )  # fmt: skip
        app = create_app(settings, launcher=self.launcher)
        self.server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
        threading.Thread(target=self.server.run, daemon=True).start()
        while not self.server.started:
            time.sleep(0.05)
        token = (tmp / "home" / "admin.token").read_text().strip()
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    def wait_idle(self, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            c = self.http.get("/v1/cluster").json()
            if c["free_cpus"] >= c["total_cpus"]:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the cluster did not become idle in {timeout} s")

    def run(self, spec: dict[str, Any]) -> dict[str, float | None]:
        self.wait_idle()
        t0 = time.time()
        r = self.http.post("/v1/jobs", json=spec)
        r.raise_for_status()
        job_id = r.json()["id"]
        while (job := self.http.get(f"/v1/jobs/{job_id}").json())["status"] not in {
            "succeeded",
            "failed",
            "cancelled",
        }:
            time.sleep(0.1)
        total = time.time() - t0
        if job["status"] != "succeeded":
            raise RuntimeError(f"job ended {job['status']}: {job['error']}")
        events = self.http.get(f"/v1/jobs/{job_id}/events").json()["data"]
        points = self.http.get(f"/v1/jobs/{job_id}/metrics", params={"name": "loss"}).json()
        logs = self.http.get(f"/v1/jobs/{job_id}/logs").json().get("text", "")
        out = phase_times(t0, events, [_ts(p["time"]) for p in points["data"]], logs)
        self.last = {"t0": t0, "job_id": job_id, "logs": logs}
        return {**out, "total": total}

    def trace(self) -> list[tuple[str, float, float]]:
        """The last job's start, seconds from its submit: ``(what, start, end)``: each Ray
        process started for it (asked for -> ready) and the ``startup_trace`` lines."""
        from ray.util.state import list_actors, list_workers

        t0, logs = self.last["t0"], self.last["logs"]
        addr = self.launcher.head.dashboard_url  # type: ignore[union-attr]
        actors = {a.pid: a.class_name for a in list_actors(address=addr, limit=1000)}
        rows = []
        for w in list_workers(address=addr, limit=1000, detail=True):
            launch = (w.worker_launch_time_ms or 0) / 1000
            start = (w.start_time_ms or 0) / 1000
            if w.worker_type == "DRIVER":
                launch = start  # a driver is not launched by the raylet: when it connected
            if launch < t0:
                continue
            name = actors.get(w.pid) or ("driver connected" if w.worker_type == "DRIVER" else "")
            rows.append((f"ray: {name or 'worker'} (pid {w.pid})", launch - t0, start - t0))
        for who, step, start, end in startup_trace.parse(logs):
            rows.append((f"{who}: {step}", start - t0, end - t0))
        return sorted(rows, key=lambda r: r[1])

    def burst(self, specs: list[dict[str, Any]], timeout: float = 3600) -> dict[str, Any]:
        """Submit every spec at once; wait until all have ended. Seconds and end states."""
        self.wait_idle()
        t0 = time.time()
        ids = []
        for spec in specs:
            r = self.http.post("/v1/jobs", json=spec)
            r.raise_for_status()
            ids.append(r.json()["id"])
        ended: dict[str, str] = {}
        while len(ended) < len(ids):
            if time.time() - t0 > timeout:
                raise RuntimeError(
                    f"burst: {len(ids) - len(ended)} jobs still open after {timeout} s"
                )
            for job_id in ids:
                if job_id not in ended:
                    status = self.http.get(f"/v1/jobs/{job_id}").json()["status"]
                    if status in {"succeeded", "failed", "cancelled"}:
                        ended[job_id] = status
            time.sleep(0.5)
        return {"seconds": time.time() - t0, "statuses": list(ended.values())}

    def close(self) -> None:
        self.server.should_exit = True
        time.sleep(1)
        self.launcher.close()  # stops the Ray head by its pid
        shutil.rmtree(self.ray_dir, ignore_errors=True)


def _fmt(v: float | None) -> str:
    return "     -" if v is None else f"{v:6.2f}"


def _table(
    jobs: list[dict[str, float | None]], floor: dict[str, float], *, cold: bool = True
) -> str:
    cols = (*PHASES, "total")

    def row(label: str, values: dict[str, float | None], ratio: float) -> str:
        return f"{label:<9}" + "".join(f"{_fmt(values.get(c)):>12}" for c in cols) + f"{ratio:8.2f}"

    lines = [f"{'job':<9}" + "".join(f"{c:>12}" for c in cols) + "  x torch"]
    for i, j in enumerate(jobs):
        label = "cold" if cold and i == 0 else f"warm {i + (0 if cold else 1)}"
        lines.append(row(label, j, (j["total"] or 0) / floor["total_s"]))
    torch_row: dict[str, float | None] = {
        "first_step": floor["first_step_s"],
        "total": floor["total_s"],
    }
    lines.append(row("torchrun", torch_row, 1.0))
    return "\n".join(lines)


def warm_medians(jobs: list[dict[str, float | None]]) -> dict[str, float | None]:
    """Each phase's median over the warm jobs (every job but the first) that saw it."""
    warm = jobs[1:] or jobs
    out: dict[str, float | None] = {}
    for key in (*PHASES, "total"):
        got = [j[key] for j in warm if j[key] is not None]
        out[key] = statistics.median(got) if got else None  # type: ignore[type-var]
    return out


def _burst(server: _Server, tmp: Path, tokenizer: str, args: argparse.Namespace) -> dict[str, Any]:
    """Item 4: N 1-worker jobs at once through the service vs N 1-process torchrun runs."""
    specs = []
    for i in range(args.burst):
        spec = job_spec(f"burst-{i}", args.steps, tokenizer, "tiny.txt")
        spec["resources"]["num_workers"] = 1
        specs.append(spec)
    got = server.burst(specs)
    statuses = got["statuses"]
    if any(s != "succeeded" for s in statuses):
        raise RuntimeError(f"burst: not every job succeeded: {sorted(statuses)}")
    t0 = time.time()
    for _ in range(args.burst):
        run_torchrun(tmp, args.steps, nproc=1)
    floor_s = time.time() - t0
    ours = 60 * args.burst / got["seconds"]
    theirs = 60 * args.burst / floor_s
    return {
        "jobs": args.burst,
        "succeeded": len(statuses),
        "seconds": got["seconds"],
        "jobs_per_min": ours,
        "torchrun_seconds": floor_s,
        "torchrun_jobs_per_min": theirs,
        "ratio": ours / theirs,
    }


class _Load:
    """A second 2-worker training job on the machine (``--load``): ``torchrun`` of the same
    tiny model for many steps, restarted when it ends, in its own process group."""

    def __init__(self, tmp: Path, tokenizer: str) -> None:
        import subprocess

        import yaml

        spec = job_spec("bench-load", 1_000_000, tokenizer, str(tmp / "tiny.txt"))
        spec["training"] |= {"output_dir": str(tmp / "load-out"), "logging_steps": 1000}
        path = tmp / "load.yaml"
        path.write_text(yaml.safe_dump(spec))
        torchrun = Path(sys.executable).with_name("torchrun")
        self.cmd = [str(torchrun), "--nproc-per-node", "2", "--master-port", str(_free_port()),
                    "-m", "trainer_core", "--spec", str(path)]  # fmt: skip
        self._popen = subprocess.Popen
        self.proc: Any = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="bench-load", daemon=True)
        self.restarts = 0

    def _keep(self) -> None:
        import subprocess

        while not self._stop.is_set():
            self.proc = self._popen(
                self.cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True,
            )  # fmt: skip
            self.proc.wait()
            self.restarts += 0 if self._stop.is_set() else 1

    def start(self, warm_up_s: float = 10.0) -> None:
        self._thread.start()
        time.sleep(warm_up_s)  # past its imports: training steps are what loads the machine

    def stop(self) -> None:
        self._stop.set()
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)  # its own group: torchrun and its ranks
            try:
                self.proc.wait(15)
            except Exception:
                os.killpg(self.proc.pid, signal.SIGKILL)
        self._thread.join(20)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alternate(
    server: _Server, tmp: Path, tokenizer: str, args: argparse.Namespace, label: str
) -> tuple[list[dict[str, float | None]], list[dict[str, float]]]:
    """``args.jobs`` jobs of ours, each followed by one torchrun run of the same training."""
    jobs, runs = [], []
    for i in range(args.jobs):
        jobs.append(server.run(job_spec(f"{label}-{i}", args.steps, tokenizer, "tiny.txt")))
        print(f"{label} job {i}:", {k: _fmt(v).strip() for k, v in jobs[-1].items()}, flush=True)
        if args.trace:
            for what, a, b in server.trace():
                print(f"    {what:<48} +{a:6.2f}  -> +{b:6.2f}", flush=True)
        runs.append(run_torchrun(tmp, args.steps))
        print(f"{label} torchrun {i}:", runs[-1], flush=True)
    return jobs, runs


def _ratios(
    jobs: list[dict[str, float | None]], runs: list[dict[str, float]], *, warm_only: bool
) -> dict[str, Any]:
    med = warm_medians(jobs) if warm_only else warm_medians([jobs[0], *jobs])
    floor = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    return {
        "jobs": jobs,
        "torchrun_runs": runs,
        "torchrun": floor,
        "warm_median": med,
        "ratio_first_step": (med["first_step"] or 0) / floor["first_step_s"],
        "ratio_total": (med["total"] or 0) / floor["total_s"],
    }


def _summary(name: str, got: dict[str, Any], cold_first_step: float | None) -> str:
    med, floor = got["warm_median"], got["torchrun"]
    cold = ""
    if cold_first_step is not None:
        cold = f"; cold: first step {_fmt(cold_first_step).strip()} s"
    return (
        f"{name}: warm median submit -> first step {_fmt(med['first_step']).strip()} s vs "
        f"torchrun {floor['first_step_s']:.2f} s = {got['ratio_first_step']:.2f}x; whole job "
        f"{_fmt(med['total']).strip()} s vs {floor['total_s']:.2f} s = {got['ratio_total']:.2f}x"
        f" torchrun{cold}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, help="jobs in a row (the first is cold)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="2 jobs, 2 steps")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--burst", type=int, default=0, help="then N 1-worker jobs at once")
    parser.add_argument("--cold", action="store_true", help="warm processes off (worker.warm)")
    parser.add_argument("--load", action="store_true", help="then again beside a 2nd training job")
    parser.add_argument("--trace", action="store_true", help="where each job's start goes")
    parser.add_argument(
        "--controller", choices=("driver", "actor"), default="driver",
        help="where Ray Train's controller runs (worker.ray_trainer)",
    )  # fmt: skip
    parser.add_argument(
        "--sync-actor", choices=("last", "first"), default="last",
        help="with the controller in the driver: the ranks' processes before Ray Train's "
        "synchronization actor (last) or after it (first, Ray Train's order)",
    )  # fmt: skip
    args = parser.parse_args()
    # Before the head starts: its raylet hands its environment to every worker.
    if args.cold:
        os.environ["SHUNTER_WARM_WORKERS"] = os.environ["SHUNTER_WARM_DRIVERS"] = "0"
    os.environ["SHUNTER_TRAIN_CONTROLLER"] = args.controller
    os.environ["SHUNTER_TRAIN_SYNC_ACTOR"] = args.sync_actor
    if args.trace:
        os.environ["SHUNTER_STARTUP_TRACE"] = "1"
        os.environ["RAY_DEDUP_LOGS"] = "0"  # the ranks' trace lines differ only in numbers
    load_before = os.getloadavg()
    if args.quick:
        args.jobs, args.steps = 2, 2
    # SIGTERM (e.g. `timeout`) must still run the finally below, or the Ray head is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    os.environ.setdefault("RAY_AUTH_MODE", "token")  # before anything imports ray
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    from overhead import _tokenizer

    tokenizer = _tokenizer()
    tmp = Path(tempfile.mkdtemp(prefix="shunter-startup-"))
    (tmp / "tiny.txt").write_text(TEXT)
    loaded: dict[str, Any] | None = None
    load_during: tuple[float, ...] = ()
    try:
        server = _Server(tmp, tokenizer)
        try:
            jobs, runs = _alternate(server, tmp, tokenizer, args, "idle")
            idle = _ratios(jobs, runs, warm_only=True)
            if args.load:
                load = _Load(tmp, tokenizer)
                load.start()
                try:
                    ljobs, lruns = _alternate(server, tmp, tokenizer, args, "loaded")
                    load_during = os.getloadavg()
                finally:
                    load.stop()
                loaded = _ratios(ljobs, lruns, warm_only=False)  # all warm already
            burst = _burst(server, tmp, tokenizer, args) if args.burst else None
        finally:
            server.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\nidle: seconds from submit (the torchrun row: medians, from its start)")
    print(_table(jobs, idle["torchrun"]))
    if loaded is not None:
        print("\nloaded (a second 2-worker training job running the whole time)")
        print(_table(loaded["jobs"], loaded["torchrun"], cold=False))
    print()
    print(_summary("idle", idle, jobs[0]["first_step"]))
    if loaded is not None:
        print(_summary("loaded", loaded, None))
    load_after = os.getloadavg()
    print(
        f"load average (1, 5, 15 min): {load_before[0]:.2f} {load_before[1]:.2f} "
        f"{load_before[2]:.2f} before, {load_after[0]:.2f} {load_after[1]:.2f} "
        f"{load_after[2]:.2f} after"
        + (f", {load_during[0]:.2f} at the end of the loaded part" if load_during else "")
        + f"; warm processes {'off' if args.cold else 'on'}; controller in the {args.controller}"
        + ("" if args.controller == "actor" else f", synchronization actor {args.sync_actor}")
    )
    results: dict[str, Any] = {
        "warm": not args.cold,
        "controller": args.controller,
        "sync_actor": args.sync_actor,
        "load_before": load_before,
        "load_after": load_after,
        "steps": args.steps,
        "cpus": os.cpu_count(),
        **idle,
        "loaded": loaded,
    }
    if burst is not None:
        print(
            f"\nburst: {args.burst} 1-worker jobs at once, {burst['succeeded']} succeeded in "
            f"{burst['seconds']:.1f} s = {burst['jobs_per_min']:.2f} jobs/min; {args.burst} "
            f"1-process torchrun runs one after another: {burst['torchrun_seconds']:.1f} s = "
            f"{burst['torchrun_jobs_per_min']:.2f} jobs/min; ratio {burst['ratio']:.2f}x"
        )
        results["burst"] = burst
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
