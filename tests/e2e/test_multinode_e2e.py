"""Several Ray nodes on one machine (``ray.cluster_utils.Cluster``): gang placement across nodes
and the loss of a node, through the real API.

The head has 0 CPUs and two worker nodes 1 CPU each, so a 2-worker x 1-CPU job can only start
as a gang spread over both nodes, and a 3-worker job can never fit (422 at submit). Killing
rank 0's node mid-run breaks the gang; with one CPU left nothing can restart until a node
joins again, and then the job finishes from its newest checkpoint (in the same attempt if its
driver survived, as attempt 2 if the driver was on the lost node), with every step's loss in
the API exactly once.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ApiServer, slow_llama_spec, tiny_llama_spec, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from ray._private.authentication.authentication_token_setup import _enable_token_auth
    from ray.cluster_utils import Cluster

    from launcher.ray_head import ensure_token_env, free_ports

    ensure_token_env()
    # The same start-up allowances the embedded head gets (launcher.ray_head), for a busy box.
    os.environ.setdefault("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "240")
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    _enable_token_auth()  # this process talks to the new GCS too (Cluster's node checks)
    # Cluster records its address in Ray's default temp dir (/tmp/ray), which a fresh machine
    # does not have yet.
    from ray._common.utils import get_default_ray_temp_dir

    os.makedirs(get_default_ray_temp_dir(), exist_ok=True)
    # The agent's port too: Ray's default (52365) may be the free port picked for the dashboard.
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
            "temp_dir": tempfile.mkdtemp(prefix="shray-mn-", dir="/tmp"),
        },
    )
    c.add_node(num_cpus=1)
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        c.shutdown()


@pytest.fixture
def api(tmp_path: Path, data_root: Path, cluster: Any) -> Iterator[ApiServer]:
    from launcher.ray_launcher import RayLauncher, RayLauncherConfig

    launcher = RayLauncher(
        RayLauncherConfig(
            dashboard_url=f"http://{cluster.webui_url}",
            driver_python=sys.executable,
            extra_env={"SHUNTER_HEARTBEAT_S": "1"},
            # The session's embedded head runs beside this cluster: name the one to train on.
            gcs_address=cluster.address,
        )
    )
    server = ApiServer(
        tmp_path / "home", data_root, launcher, lease_seconds=20.0, max_infra_retries=2
    ).start()
    try:
        yield server
    finally:
        server.stop()
        launcher.close()


def test_gang_across_nodes_survives_the_loss_of_a_node(api: ApiServer, cluster: Any) -> None:
    c = api.launcher.cluster()
    assert len([n for n in c.nodes if n.alive]) == 3 and c.total_cpus == 2
    too_big = api.api().post(
        "/v1/jobs", json=tiny_llama_spec("mn-big", resources={"num_workers": 3})
    )
    assert too_big.status_code == 422, too_big.text
    steps = 30
    job_id = api.submit(slow_llama_spec("mn-gang", steps=steps))
    try:
        wait_for(lambda: api.metrics(job_id, "loss"), timeout=300, what="the first step")
    except AssertionError:
        logs = api.launcher.logs(f"{job_id}-1")
        raise AssertionError(
            f"no first step: job {api.job(job_id)}\nevents {api.events(job_id)}\n"
            f"logs (tail):\n{logs[-6000:]}"
        ) from None
    # The gang spans both 1-CPU nodes. Asked of Ray's actor table rather than of free CPUs: the
    # autoscaler's usage report lags by seconds, and a finished actor stays listed.
    wait_for(
        lambda: len(_train_worker_nodes(cluster)) == 2, timeout=60, what="workers on both nodes"
    )
    wait_for(
        lambda: any(ck["step"] >= 4 for ck in api.checkpoints(job_id)),
        timeout=300,
        what="a checkpoint",
    )
    # Rank 0's node: the harder loss (rank 0 ships the metrics; a lost driver would be too).
    victim = _node_of_rank0(api, cluster, f"{job_id}-1")
    cluster.remove_node(victim, allow_graceful=False)
    wait_for(
        lambda: api.launcher.cluster().total_cpus == 1, timeout=120, what="the cluster to shrink"
    )
    assert api.job(job_id)["status"] in {"running", "queued", "starting"}
    cluster.add_node(num_cpus=1)
    job = api.wait_done(job_id, timeout=420)
    assert job["status"] == "succeeded", (job["error"], api.events(job_id))
    assert [p["step"] for p in api.metrics(job_id, "loss")] == list(range(1, steps + 1))


def _train_workers(cluster: Any) -> list[Any]:
    """Ray's actor table (this cluster's): the jobs' training workers, running or ended."""
    from ray.util.state import list_actors

    return list_actors(
        address=f"http://{cluster.webui_url}",
        filters=[("class_name", "=", "RayTrainWorker")],
        limit=1000,
        detail=True,
    )


def _train_worker_nodes(cluster: Any) -> set[str]:
    return {a.node_id for a in _train_workers(cluster) if a.node_id}


def _node_of_rank0(api: ApiServer, cluster: Any, submission_id: str) -> Any:
    found = wait_for(
        lambda: re.search(
            r"RayTrainWorker pid=(\d+)[^)]*\)\S* shunter: rank 0 entered",
            api.launcher.logs(submission_id),
        ),
        timeout=60,
        what="rank 0's start in the logs",
    )
    pid = int(found.group(1))
    node_id = next(a.node_id for a in _train_workers(cluster) if a.pid == pid)
    return next(n for n in cluster.worker_nodes if n.node_id == node_id)
