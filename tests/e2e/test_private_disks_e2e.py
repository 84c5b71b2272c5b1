"""Multi-node jobs with no shared disk (issue 20's bar), with real processes: a Ray head (0
CPUs) and 1-CPU worker nodes that each run in a mount namespace of their own, with a private
tmpfs over their Ray temp dir and their staging dir (the same path on every node; this process
sees it empty), and a moto S3 server as the job storage. A 2-worker job can only run as one
worker per node, so every checkpoint is made of two nodes' parts, each written where the
other node cannot see it.

- FSDP2 and DeepSpeed ZeRO-3 each: checkpoints (each node holds only its own part; only
  rank 0's has the manifest), is preempted (paused: checkpoint and stop), rank 0's node is
  replaced by a fresh one, and it resumes from the bucket at exactly the next step on the new
  placement.
- Then the ZeRO-3 job loses the other node (its raylet killed with SIGKILL) mid-attempt; Ray
  Train restarts the gang once a fresh node has joined, from the bucket, and the job succeeds
  with a loss point for every step.
"""

from __future__ import annotations

import io
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from harness import ApiServer, slow_llama_spec, wait_for
from ray_nodes import alive_nodes, join_node, outward_ip, stop_group
from s3_server import S3Server, aws_env, running_s3

pytestmark = pytest.mark.slow

STEPS = 8
# worker.staging's root: the driver (on the head) names it, every node has its own.
STAGE_ROOT = Path(tempfile.gettempdir()) / "shunter-stage"


def _can_unshare() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        return False
    probe = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "true"], capture_output=True
    )
    return probe.returncode == 0


class PrivateNodes:
    """The head and its worker nodes, each node in its own mount namespace."""

    def __init__(self, head: Any, logs: Path, private: Path, env: dict[str, str]):
        self.head, self.logs, self.private, self.env = head, logs, private, env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}  # Ray node id -> its process
        self._started = 0

    def add(self) -> str:
        """Join one fresh 1-CPU node (restarted if Ray's 30 s registration ran out)."""
        for _ in range(3):
            self._started += 1
            known = {n["node_id"] for n in alive_nodes(self.head)}
            log = self.logs / f"node-{self._started}.log"
            proc = join_node(
                self.head,
                f"127.0.0.{1 + self._started}",  # an address of its own: a node of its own
                cpus=1,
                log=log,
                env=self.env,
                private=self.private,
                also_private=(STAGE_ROOT,),
            )
            new = wait_for(
                lambda proc=proc, known=known: (
                    proc.poll() is not None
                    or [n["node_id"] for n in alive_nodes(self.head) if n["node_id"] not in known]
                ),
                timeout=180,
                what=f"a node to join (log: {log})",
            )
            if new is not True:
                self.procs[new[0]] = proc
                return str(new[0])
        tail = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"no node joined (logs: {self.logs}); the last one ended:\n{tail}")

    def files(self, node_id: str, path: Path) -> set[str]:
        """The files under ``path`` as that node sees them (in its namespace)."""
        proc = self.procs[node_id]
        out = subprocess.run(
            ["nsenter", f"--target={proc.pid}", "--mount", "--",
             "find", str(path), "-type", "f"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        return {line for line in out.stdout.splitlines() if line}

    def remove(self, node_id: str) -> None:
        stop_group(self.procs.pop(node_id))
        wait_for(
            lambda: node_id not in {n["node_id"] for n in alive_nodes(self.head)},
            timeout=120,
            what=f"node {node_id} to leave",
        )

    def kill_raylet(self, node_id: str) -> None:
        proc = self.procs.pop(node_id)
        raylets = [
            p for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == "raylet"
        ]
        assert raylets, f"no raylet under node process {proc.pid}"
        for p in raylets:
            p.send_signal(signal.SIGKILL)
        stop_group(proc)  # what is left of the node (its agents, its workers)

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_group(proc)
        self.procs.clear()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture(scope="module")
def nodes(tmp_path_factory: pytest.TempPathFactory, s3: S3Server) -> Iterator[PrivateNodes]:
    if not _can_unshare():
        pytest.skip("needs root and unshare/nsenter: nodes with private mount namespaces")
    from launcher.ray_head import RayHead, RayHeadConfig

    ip = outward_ip()
    env = {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    head = RayHead.start(
        RayHeadConfig(temp_root=tmp_path_factory.mktemp("pd-head"), num_cpus=0, host=ip, env=env)
    )
    # Short, under /tmp: Ray's unix sockets live under each node's temp dir and their paths
    # must fit 107 bytes (pytest's basetemp grows: /tmp/pytest-of-root/pytest-100/...).
    private = Path(tempfile.mkdtemp(prefix="shpd-", dir="/tmp"))
    cluster = PrivateNodes(head, tmp_path_factory.mktemp("pd-logs"), private, env)
    try:
        cluster.add()
        cluster.add()
        yield cluster
    finally:
        cluster.stop()
        head.stop()
        shutil.rmtree(private, ignore_errors=True)


@pytest.fixture
def api(tmp_path: Path, data_root: Path, nodes: PrivateNodes, s3: S3Server) -> Iterator[ApiServer]:
    from launcher.ray_launcher import RayLauncher, RayLauncherConfig

    launcher = RayLauncher(
        RayLauncherConfig(
            dashboard_url=nodes.head.dashboard_url,
            driver_python=sys.executable,
            extra_env={"SHUNTER_HEARTBEAT_S": "1", **s3.env},
            gcs_address=nodes.head.gcs_address,
        )
    )
    bucket = s3.bucket("pd-" + secrets.token_hex(4))
    server = ApiServer(
        tmp_path / "home",
        data_root,
        launcher,
        lease_seconds=60.0,
        max_infra_retries=2,
        storage=f"s3://{bucket}/shunter",
    ).start()
    try:
        yield server
    finally:
        server.stop_jobs()
        server.stop()
        launcher.close()


def _worker_nodes(nodes: PrivateNodes) -> dict[str, str]:
    """Ray node id -> the pid of the live training worker there (this cluster's)."""
    from ray.util.state import list_actors

    actors = list_actors(
        address=nodes.head.dashboard_url,
        filters=[("class_name", "=", "RayTrainWorker"), ("state", "=", "ALIVE")],
        limit=100,
        detail=True,
    )
    return {a.node_id: str(a.pid) for a in actors if a.node_id}


def _first_checkpoint(api: ApiServer, job_id: str) -> dict[str, Any]:
    try:
        found = wait_for(
            lambda: [c for c in api.checkpoints(job_id) if c["verified"]],
            timeout=400,
            what="a verified checkpoint",
        )
    except AssertionError:
        logs = api.launcher.logs(f"{job_id}-{api.job(job_id)['attempt']}")
        raise AssertionError(
            f"no verified checkpoint: {api.job(job_id)}\nevents {api.events(job_id)}\n"
            f"checkpoints {api.checkpoints(job_id)}\nlogs (tail):\n{logs[-8000:]}"
        ) from None
    return dict(found[0])


def _preempt_onto_a_fresh_node(
    api: ApiServer, nodes: PrivateNodes, job_id: str
) -> tuple[int, str, str]:
    """Checkpoint, check each node holds only its part, preempt (pause), replace rank 0's
    node by a fresh one, resume, and see a worker land there. Returns (the step the job
    stopped at, the fresh node, the node kept from the first placement)."""
    ckpt = _first_checkpoint(api, job_id)
    placed = wait_for(lambda: len(w := _worker_nodes(nodes)) == 2 and w, timeout=60,
                      what="the two workers")  # fmt: skip
    # Each node holds only its own part of the checkpoint: rank 0's node the manifest.
    name = ckpt["uri"].rsplit("/", 1)[1]
    stage = STAGE_ROOT / job_id / "attempt-1" / name
    parts = {node: {Path(f).name for f in nodes.files(node, stage)} for node in placed}
    assert all(parts.values()), parts
    with_manifest = [n for n, files in parts.items() if "manifest.json" in files]
    assert len(with_manifest) == 1, parts
    kept = next(n for n in parts if n not in with_manifest)
    assert "rng-rank1.pt" in parts[kept] and "rng-rank1.pt" not in parts[with_manifest[0]]
    # ... and nothing of it is where this process (the API, the head) could see it.
    assert not any(nodes.private.iterdir()) and not (STAGE_ROOT / job_id).exists()

    assert api.api().post(f"/v1/jobs/{job_id}/pause").status_code == 200
    paused = api.wait_status(job_id, {"paused", "failed", "succeeded"}, timeout=300)
    assert paused["status"] == "paused", (paused["error"], api.events(job_id))
    stopped = max(c["step"] for c in api.checkpoints(job_id) if c["verified"])
    # Rank 0's node goes; a fresh node, which never saw any of this job's files, joins.
    nodes.remove(with_manifest[0])
    fresh = nodes.add()

    assert api.api().post(f"/v1/jobs/{job_id}/resume").status_code == 200
    wait_for(lambda: fresh in _worker_nodes(nodes) or api.job(job_id)["status"] != "running",
             timeout=300, what="a worker on the fresh node")  # fmt: skip
    return stopped, fresh, kept


def _resumed_at(api: ApiServer, job_id: str, attempt: int) -> list[tuple[str, str]]:
    logs = api.launcher.logs(f"{job_id}-{attempt}")
    return re.findall(r"resumed from \S*checkpoint-(\d+) at step (\d+)", logs)


def test_fsdp_resumes_from_the_bucket_on_a_new_node(
    api: ApiServer, nodes: PrivateNodes, s3: S3Server
) -> None:
    spec = slow_llama_spec(
        "pd-fsdp", steps=STEPS, distributed={"strategy": "fsdp"}, training={"save_steps": 2}
    )
    job_id = api.submit(spec)
    stopped, _, _ = _preempt_onto_a_fresh_node(api, nodes, job_id)
    job = api.wait_done(job_id, timeout=400)
    assert job["status"] == "succeeded", (job["error"], api.events(job_id))
    resumed = _resumed_at(api, job_id, 2)
    assert resumed and int(resumed[0][1]) == stopped, (resumed, stopped)
    losses = api.metrics(job_id, "loss")
    first = [p["step"] for p in losses if p["attempt"] == 1]
    second = [p["step"] for p in losses if p["attempt"] == 2]
    assert first == list(range(1, len(first) + 1)) and len(first) >= stopped, first
    assert second == list(range(stopped + 1, STEPS + 1)), second

    # The bucket side (what tests/e2e/test_s3_storage_e2e.py proved on one node before it
    # was folded in here): attempt 1's checkpoints are listed under the job's prefix, verified,
    # non-empty and in the bucket manifest and all; the final model is there and downloads;
    # DELETE removes every object of the job.
    bucket = api._settings["storage"].removeprefix("s3://").split("/", 1)[0]
    prefix = f"s3://{bucket}/shunter/{job_id}"
    keys = s3.keys(bucket, f"shunter/{job_id}/")
    first = [c for c in api.checkpoints(job_id) if c["attempt"] == 1]
    assert first, api.checkpoints(job_id)
    for c in first:
        assert c["uri"].startswith(f"{prefix}/checkpoint-"), c
        assert c["verified"] and c["bytes"] > 0, c
        assert c["uri"].removeprefix(f"s3://{bucket}/") + "/manifest.json" in keys, (c, keys)
    assert job["final_model_uri"] == f"{prefix}/final", job
    r = api.api().get(f"/v1/jobs/{job_id}/checkpoints/final/download")
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        assert f"{job_id}-final/config.json" in {m.name for m in tar.getmembers()}
    assert api.api().delete(f"/v1/jobs/{job_id}").status_code == 204
    assert s3.keys(bucket, f"shunter/{job_id}/") == []


def test_zero3_resumes_on_a_new_node_then_survives_a_killed_raylet(
    api: ApiServer, nodes: PrivateNodes
) -> None:
    spec = slow_llama_spec(
        "pd-zero3",
        steps=STEPS,
        distributed={"strategy": "deepspeed", "deepspeed": {"stage": 3}},
        training={"save_steps": 2},
        max_restarts=2,
    )
    job_id = api.submit(spec)
    stopped, fresh, kept = _preempt_onto_a_fresh_node(api, nodes, job_id)
    resumed = wait_for(lambda: _resumed_at(api, job_id, 2), timeout=120,
                       what="attempt 2 to resume")  # fmt: skip
    assert int(resumed[0][1]) == stopped, (resumed, stopped)
    # Now the node kept from the first placement dies with the job on it.
    assert api.job(job_id)["status"] == "running", api.job(job_id)
    nodes.kill_raylet(kept)
    wait_for(
        lambda: kept not in {n["node_id"] for n in alive_nodes(nodes.head)},
        timeout=120,
        what="Ray to see the node gone",
    )
    nodes.add()  # room for the gang again: the fresh node of the resume and a newer one
    job = api.wait_done(job_id, timeout=500)
    assert job["status"] == "succeeded", (job["error"], api.events(job_id))
    steps = [p["step"] for p in api.metrics(job_id, "loss")]
    assert sorted(set(steps)) == list(range(1, STEPS + 1)), steps
    assert min(p["step"] for p in api.metrics(job_id, "loss") if p["attempt"] >= 2) == stopped + 1
    # Ray Train restarted the gang inside attempt 2 (or, had the driver been lost, a new
    # attempt); either way from the newest checkpoint in the bucket.
    types = [e["type"] for e in api.events(job_id)]
    assert "worker_restarted" in types or job["attempt"] == 3, (types, job)
    assert fresh in {n["node_id"] for n in alive_nodes(nodes.head)}
    # The step it was preempted at, consolidated from both nodes' ZeRO-3 parts in the bucket
    # (by the API, on the first download: DeepSpeed's import and the merge took over the
    # client's 30 s at a 1-minute load of 17).
    r = api.api().get(f"/v1/jobs/{job_id}/checkpoints/{stopped}/download", timeout=180)
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = {m.name for m in tar.getmembers()}
    assert f"{job_id}-{stopped}/config.json" in names, names
    assert any(n.endswith(".safetensors") for n in names), names


def test_trains_on_an_uploaded_dataset_and_base_model(
    api: ApiServer, nodes: PrivateNodes, tmp_path: Path
) -> None:
    """Issue #28's bar: a 2-worker job, one worker per private-disk node, trains on a dataset
    and a base model uploaded through the API (in the bucket, on no data root); its model
    downloads and loads."""
    import torch
    from harness import MINILM_DIR
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    upload = tmp_path / "upload"  # not a data root: only the API's upload reads it
    (upload / "base").mkdir(parents=True)
    (upload / "tiny.txt").write_text("To be, or not to be, that is the question.\n" * 400)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=30522, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=128,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(upload / "base", safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        shutil.copy(MINILM_DIR / name, upload / "base" / name)

    http = api.api()
    with open(upload / "tiny.txt", "rb") as fh:
        r = http.post("/v1/datasets", files=[("file", ("tiny.txt", fh))], data={"name": "tiny"})
    assert r.status_code == 201, r.text
    ds = r.json()["id"]
    parts = [("file", (p.name, p.read_bytes())) for p in sorted((upload / "base").iterdir())]
    r = http.post("/v1/models", files=parts)
    assert r.status_code == 201, r.text
    mdl = r.json()["id"]

    spec = {
        "name": "pd-objects",
        "model": {"name_or_path": mdl, "task": "causal-lm"},
        "data": {"train": {"dataset": ds}, "text_field": "text", "max_length": 64, "packing": True},
        "training": {"max_steps": 4, "per_device_train_batch_size": 2, "logging_steps": 1,
                     "save_steps": 2, "learning_rate": 1e-3},
        "resources": {"num_workers": 2, "cpus_per_worker": 1, "gpus_per_worker": 0},
    }  # fmt: skip
    job_id = api.submit(spec)
    job = api.wait_done(job_id, timeout=500)
    if job["status"] != "succeeded":
        logs = api.launcher.logs(f"{job_id}-{job['attempt']}")
        raise AssertionError(f"{job['error']} {api.events(job_id)}\n{logs[-6000:]}")
    assert [p["step"] for p in api.metrics(job_id, "loss")] == [1, 2, 3, 4]

    r = http.get(f"/v1/jobs/{job_id}/checkpoints/final/download")
    assert r.status_code == 200, r.text
    out = tmp_path / "model"
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        tar.extractall(out, filter="data")
    model = AutoModelForCausalLM.from_pretrained(out / f"{job_id}-final")
    assert model.config.num_hidden_layers == 2
