"""GPU types on real Ray (issue 30 item 1's live bar), on a CPU-only machine: two worker nodes
with different custom accelerator resources (``accelerator_type:A100`` and
``accelerator_type:H100``, as Ray gives GPU nodes) and a head with no CPUs. The service reads
each node's type from Ray; a job asking for one type trains only on that type's node (its
workers are pinned by node id), whichever node Ray would otherwise have picked. The two
jobs run one after the other, each asking for the other node's type than the last.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ApiServer, tiny_llama_spec

pytestmark = pytest.mark.slow

TYPES = {"a100": "accelerator_type:A100", "h100": "accelerator_type:H100"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray._common.utils import get_default_ray_temp_dir
    from ray._private.authentication.authentication_token_setup import _enable_token_auth
    from ray.cluster_utils import Cluster

    from launcher.ray_head import ensure_token_env, free_ports

    ensure_token_env()
    os.environ.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "240")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    _enable_token_auth()
    os.makedirs(get_default_ray_temp_dir(), exist_ok=True)
    gcs, dash, agent = free_ports(3)
    c = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "gcs_server_port": gcs,
            "include_dashboard": True,
            "dashboard_host": "127.0.0.1",
            "dashboard_port": dash,
            "dashboard_agent_listen_port": agent,
            "temp_dir": tempfile.mkdtemp(prefix="shray-acc-", dir="/tmp"),
        },
    )
    nodes = {t: c.add_node(num_cpus=1, resources={r: 1}) for t, r in TYPES.items()}
    c.wait_for_nodes()
    try:
        yield c, {t: n.node_id for t, n in nodes.items()}
    finally:
        c.shutdown()


@pytest.fixture
def api(tmp_path: Path, data_root: Path, cluster: Any) -> Iterator[ApiServer]:
    from launcher.ray_launcher import RayLauncher, RayLauncherConfig

    c, _ = cluster
    launcher = RayLauncher(
        RayLauncherConfig(
            dashboard_url=f"http://{c.webui_url}",
            driver_python=sys.executable,
            extra_env={"SHUNTER_HEARTBEAT_S": "1"},
            gcs_address=c.address,
        )
    )
    server = ApiServer(tmp_path / "home", data_root, launcher).start()
    try:
        yield server
    finally:
        server.stop()
        launcher.close()


def _worker_nodes(c: Any, job_id: str) -> set[str]:
    """The nodes this job's training workers ran on (Ray's actor table, by the job's
    submission: the actors' Ray job is the driver's)."""
    from ray.util.state import list_actors, list_jobs

    sub = f"{job_id}-1"
    ray_job = next(
        j.job_id for j in list_jobs(address=f"http://{c.webui_url}") if j.submission_id == sub
    )
    actors = list_actors(
        address=f"http://{c.webui_url}",
        filters=[("class_name", "=", "RayTrainWorker"), ("job_id", "=", ray_job)],
        limit=1000,
        detail=True,
    )
    return {a.node_id for a in actors if a.node_id}


def test_a_job_asking_for_a_type_trains_only_on_that_type(api: ApiServer, cluster: Any) -> None:
    c, node_of = cluster
    seen = api.api().get("/v1/cluster").json()
    assert {n["node_id"]: n["accelerator"] for n in seen["nodes"] if n["accelerator"]} == {
        node_of["a100"]: "a100",
        node_of["h100"]: "h100",
    }
    assert set(seen["by_type"]) == {"a100", "h100"}
    bad = api.api().post(
        "/v1/jobs", json=tiny_llama_spec("acc-bad", resources={"accelerator": "l4"})
    )
    assert bad.status_code == 422 and "a100, h100" in bad.text, bad.text
    for kind in ("h100", "a100"):
        spec = tiny_llama_spec(
            f"acc-{kind}",
            steps=4,
            resources={"num_workers": 1, "cpus_per_worker": 1, "accelerator": kind},
        )
        job_id = api.submit(spec)
        job = api.wait_done(job_id, timeout=300)
        assert job["status"] == "succeeded", (job["error"], api.events(job_id))
        assert _worker_nodes(c, job_id) == {node_of[kind]}, (kind, node_of)
