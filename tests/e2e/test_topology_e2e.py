"""The compose topology played with real processes (issue 14): PostgreSQL, two API replicas
(``shunter serve`` processes on one database), a Ray head started with ``ray start --head`` and
a separate Ray worker node that joins it with ``ray start --address``. The head has no CPUs, so
a job can only run on the worker node. A job submitted to one replica succeeds, the other
replica reports the same job, and Ray's actor table shows the job's training workers on the
worker node. This is what ``docker/compose.yaml`` runs, minus Docker.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import MINILM_DIR, tiny_llama_spec, wait_for
from ray_nodes import alive_nodes, join_node, outward_ip, stop_group

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for the replicas (they migrate it themselves)."""
    base = os.environ.get("SHUNTER_TEST_POSTGRES_URL")
    if not base:
        pytest.skip("SHUNTER_TEST_POSTGRES_URL not set: the topology runs on PostgreSQL")
    import sqlalchemy as sa

    name = "topo_" + secrets.token_hex(5)
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE DATABASE {name}"))
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture(scope="module")
def ray_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """`ray start --head` (0 CPUs) and a worker node (2 CPUs) joining it, as separate processes."""
    from launcher.ray_head import RayHead, RayHeadConfig

    # Two nodes join over the machine's own address, as on a real network (a loopback-only
    # head cannot take a second node).
    ip = outward_ip()
    # A node image's `python` has shunter[train] installed; here that is this venv's (the
    # launcher runs `python -m worker.launch_driver` on an external cluster, not sys.executable).
    multi = {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    head = RayHead.start(
        RayHeadConfig(
            temp_root=tmp_path_factory.mktemp("topo-head"), num_cpus=0, host=ip, env=multi
        )
    )
    worker_dir = tmp_path_factory.mktemp("topo-worker")

    def join(attempt: int) -> subprocess.Popen[bytes]:
        log = worker_dir / f"worker-node-{attempt}.log"
        return join_node(head, ip, cpus=2, log=log, env=multi)

    # Ray gives a joining raylet a fixed 30 s to register; on a loaded machine that can run
    # out, and `ray start` then exits: start it again (fresh ports), as an operator would.
    node = join(1)
    try:
        for attempt in range(2, 5):
            alive = wait_for(
                lambda node=node: (
                    node.poll() is not None or ((n := alive_nodes(head)) and len(n) == 2 and n)
                ),
                timeout=180,
                what=f"the worker node to join (logs: {worker_dir})",
            )
            if alive is not True:
                break
            node = join(attempt)
        assert isinstance(alive, list), f"the worker node never joined (logs: {worker_dir})"
        worker_id = next(n["node_id"] for n in alive if not n["is_head_node"])
        headers = {"Authorization": f"Bearer {head.token}"}
        yield {"head": head, "worker_node_id": worker_id, "headers": headers}
    finally:
        stop_group(node)
        head.stop()


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).is_success
    except httpx.HTTPError:
        return False


def _serve(
    home: Path, port: int, *, db: str, head: Any, data: Path, storage: Path, admin: str
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SHUNTER_HOME": str(home),
        "SHUNTER_DATABASE_URL": db,
        "SHUNTER_MIGRATE_ON_START": "true",
        "SHUNTER_ADMIN_TOKEN": admin,
        "SHUNTER_RAY_ADDRESS": head.dashboard_url,
        "SHUNTER_RAY_GCS_ADDRESS": head.gcs_address,
        "SHUNTER_DATA_ROOTS": f"{data}:{MINILM_DIR}",  # the data, and the tokenizer
        "SHUNTER_STORAGE": str(storage),
        "SHUNTER_HOST": "127.0.0.1",
        "SHUNTER_PORT": str(port),
        "SHUNTER_SCHEDULER_INTERVAL_S": "0.5",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": head.token,
    }
    home.mkdir(parents=True, exist_ok=True)
    log = open(home / "serve.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "shunter"), "serve"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )


def test_two_replicas_one_database_a_head_and_a_worker_node(
    tmp_path: Path, pg_database: str, ray_nodes: dict[str, Any]
) -> None:
    from launcher.ray_head import free_ports

    head = ray_nodes["head"]
    data = tmp_path / "data"
    data.mkdir()
    (data / "tiny.txt").write_text("To be, or not to be, that is the question. " * 200)
    storage = tmp_path / "storage"  # the shared volume every container mounts
    admin = "shn_" + secrets.token_hex(24)
    auth = {"Authorization": f"Bearer {admin}"}
    ports = free_ports(2)
    replicas: list[subprocess.Popen[bytes]] = []
    try:
        for i, port in enumerate(ports):
            replicas.append(
                _serve(
                    tmp_path / f"replica{i}", port, db=pg_database, head=head, data=data,
                    storage=storage, admin=admin,
                )
            )  # fmt: skip
            wait_for(
                lambda p=port: _healthy(f"http://127.0.0.1:{p}"),
                timeout=120,
                what=f"replica {i} healthy (log: {tmp_path / f'replica{i}' / 'serve.log'})",
            )
        first, second = (f"http://127.0.0.1:{p}" for p in ports)
        r = httpx.post(f"{first}/v1/jobs", json=tiny_llama_spec("topology", steps=3), headers=auth)
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]

        def done() -> dict[str, Any] | None:
            job: dict[str, Any] = httpx.get(
                f"{second}/v1/jobs/{job_id}", headers=auth, timeout=5
            ).json()
            return job if job["status"] in {"succeeded", "failed", "cancelled"} else None

        job = wait_for(done, timeout=400, what="the job to end, read through the other replica")
        assert job["status"] == "succeeded", job
        actors = httpx.get(
            f"{head.dashboard_url}/api/v0/actors",
            params={"filter_keys": "class_name", "filter_predicates": "=",
                    "filter_values": "RayTrainWorker", "detail": "1", "limit": "1000"},
            headers=ray_nodes["headers"],
            timeout=10,
        ).json()["data"]["result"]["result"]  # fmt: skip
        nodes = {a["node_id"] for a in actors}
        assert nodes == {ray_nodes["worker_node_id"]}, (nodes, ray_nodes["worker_node_id"])
        loss = httpx.get(
            f"{first}/v1/jobs/{job_id}/metrics", params={"name": "loss"}, headers=auth
        ).json()
        assert [p["step"] for p in loss["data"]] == [1, 2, 3]
    finally:
        for proc in replicas:
            stop_group(proc)
        time.sleep(0.5)
