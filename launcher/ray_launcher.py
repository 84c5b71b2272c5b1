"""``RayLauncher``: the real ``service.launch.Launcher``, on the Ray Jobs API.

One attempt of one job is one Ray job, submission id ``<job id>-<attempt>`` (so a resubmit of
the same attempt is refused by Ray and detectable). The entrypoint is fixed by our own code
(``<python> -m worker.launch_driver``, which runs ``worker.driver`` in a warm process); the
attempt's identity reaches the driver as runtime-env variables, never inside a shell string.
No ``working_dir`` is uploaded: every node runs the same installed environment
(``PYTHONPATH`` points at our source root for a source checkout).

``cluster()`` reads the dashboard's HTTP API: ``/api/v0/nodes`` (which nodes, alive or not)
and ``/api/cluster_status`` (per-node ``[used, total]`` resources, where a placement group's
reservation counts as used, so free = total - reserved).

``from_settings(settings)`` connects to ``settings.ray_address`` (the dashboard URL of an
existing cluster, e.g. ``http://head:8265``) or, when it is empty, starts an embedded head
(``launcher.ray_head``) that ``close()`` stops.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from ray.job_submission import JobStatus, JobSubmissionClient

from launcher.ray_head import RayHead, RayHeadConfig
from service.launch import (
    ClusterResources,
    LaunchRequest,
    LaunchState,
    LaunchStatus,
    NodeResources,
    RankStack,
    StackTarget,
)
from shunter.wire import PROBE_PREFIX, STACK_TARGETS_ENV, STACKS_PREFIX
from storage import STORAGE_ENV

__all__ = [
    "DEFAULT_TRAIN_ENV",
    "RayLauncher",
    "RayLauncherConfig",
    "from_settings",
    "start_embedded",
    "storage_env",
]

log = logging.getLogger(__name__)

_SOURCE_ROOT = Path(__file__).resolve().parents[1]

_STATE = {
    JobStatus.PENDING: LaunchState.PENDING,
    JobStatus.RUNNING: LaunchState.RUNNING,
    JobStatus.SUCCEEDED: LaunchState.SUCCEEDED,
    JobStatus.FAILED: LaunchState.FAILED,
    JobStatus.STOPPED: LaunchState.STOPPED,
}
_ENDED = {LaunchState.SUCCEEDED, LaunchState.FAILED, LaunchState.STOPPED}
# ``statuses``: up to this many jobs are asked one by one, more with one listing of all.
_ONE_BY_ONE = 4

# Ray Train knobs every driver and worker gets. ray.train.report() blocks until the
# controller's next poll, every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (default 2 s); we only call
# it when a checkpoint is published, but a shorter poll also makes start-up and shutdown of
# the worker group notice state changes sooner (measured in bench/overhead.py).
DEFAULT_TRAIN_ENV = {
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",
    "RAY_TRAIN_V2_ENABLED": "1",
    # One actor process less per job start (~1-2 s of CPU on a small machine). The watcher
    # turns a node drain into a graceful restart; without it a drain counts as a failure
    # against max_restarts, which the attempt budget absorbs.
    "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


@dataclass(frozen=True, kw_only=True)
class RayLauncherConfig:
    dashboard_url: str
    # The interpreter that runs the driver on the cluster: the service's own for the
    # embedded head (same machine, same venv); plain "python" on an external cluster image.
    driver_python: str = "python"
    extra_env: dict[str, str] = field(default_factory=dict)
    http_timeout_s: float = 10.0
    # The cluster's GCS address (host:port) when known (the embedded head): the driver
    # connects there explicitly. Ray's job supervisor sets the driver's RAY_ADDRESS by
    # auto-detection, which picks the wrong instance when several Ray clusters run on one
    # machine (seen in CI: a job submitted to one cluster trained on another).
    gcs_address: str | None = None


class RayLauncher:
    """Launcher on a Ray cluster's job API. Thread-safe for the scheduler + API threads."""

    def __init__(self, config: RayLauncherConfig, *, head: RayHead | None = None) -> None:
        self.config = config
        self.head = head
        # Explicit header: Ray caches RAY_AUTH_MODE when it is first imported, which may be
        # before the embedded head exported it.
        token = os.environ.get("RAY_AUTH_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = JobSubmissionClient(config.dashboard_url, headers=headers)
        self._http = httpx.Client(
            base_url=config.dashboard_url, headers=headers, timeout=config.http_timeout_s
        )

    # -- submit / status / stop / logs --------------------------------------------------
    def runtime_env(self, req: LaunchRequest) -> dict[str, Any]:
        env = {
            **DEFAULT_TRAIN_ENV,
            **self.config.extra_env,
            "SHUNTER_API_URL": req.api_url,
            "SHUNTER_ATTEMPT_TOKEN": req.attempt_token,
            "SHUNTER_JOB_ID": req.job_id,
            "SHUNTER_ATTEMPT": str(req.attempt),
        }
        if self.config.gcs_address:
            # RAY_ADDRESS for the processes that read it before the driver runs;
            # SHUNTER_RAY_GCS_ADDRESS because the supervisor overwrites RAY_ADDRESS.
            env["RAY_ADDRESS"] = env["SHUNTER_RAY_GCS_ADDRESS"] = self.config.gcs_address
        pythonpath = os.pathsep.join(p for p in (str(_SOURCE_ROOT), env.get("PYTHONPATH")) if p)
        env["PYTHONPATH"] = pythonpath
        return {"env_vars": env}

    def submit(self, req: LaunchRequest) -> None:
        """Start the attempt's driver. Raises when Ray refuses (e.g. the id already exists)."""
        self._client.submit_job(
            # worker.driver, in a warm process forked from the node's driver template.
            entrypoint=f"{self.config.driver_python} -m worker.launch_driver",
            submission_id=req.submission_id,
            runtime_env=self.runtime_env(req),
            # The driver only coordinates; its CPU must not be taken from the workers' gang.
            entrypoint_num_cpus=0,
            metadata={"shunter_job_id": req.job_id, "shunter_attempt": str(req.attempt)},
        )

    def status(self, submission_id: str) -> LaunchStatus:
        try:
            info = self._client.get_job_info(submission_id)
        except RuntimeError as e:  # the SDK raises RuntimeError on 404
            if "404" in str(e) or "does not exist" in str(e):
                return LaunchStatus(state=LaunchState.UNKNOWN, message=str(e))
            raise
        return LaunchStatus(state=_STATE[info.status], message=info.message or "")

    def statuses(self, submission_ids: list[str]) -> dict[str, LaunchStatus]:
        """One ``GET /api/jobs/`` for many (it lists every job the cluster remembers, so a
        few are asked one by one): the sweep's cost per tick no longer grows with the
        number of running jobs in HTTP calls."""
        if len(submission_ids) <= _ONE_BY_ONE:
            return {sid: self.status(sid) for sid in submission_ids}
        known = {
            job.submission_id: LaunchStatus(state=_STATE[job.status], message=job.message or "")
            for job in self._client.list_jobs()
            if job.submission_id
        }
        unknown = LaunchStatus(state=LaunchState.UNKNOWN, message="no such job in Ray")
        return {sid: known.get(sid, unknown) for sid in submission_ids}

    def stop(self, submission_id: str) -> None:
        """Ask Ray to stop the job (SIGTERM, then SIGKILL to the driver; its actors die)."""
        try:
            self._client.stop_job(submission_id)
        except RuntimeError as e:
            if "404" not in str(e) and "does not exist" not in str(e):
                raise

    def logs(self, submission_id: str, tail: int | None = None) -> str:
        """The driver's log, which carries the workers' output too (Ray's log_to_driver)."""
        try:
            text: str = self._client.get_job_logs(submission_id)
        except RuntimeError as e:
            if "404" in str(e) or "does not exist" in str(e):
                return ""
            raise
        if tail is None:
            return text
        lines = text.splitlines()
        return "\n".join(lines[-tail:] if tail > 0 else [])

    # -- doctor -------------------------------------------------------------------------
    def ray_version(self) -> str | None:
        """The cluster's Ray version, from its dashboard."""
        r = self._http.get("/api/version")
        r.raise_for_status()
        got = r.json().get("ray_version")
        return str(got) if got else None

    def probe(self, *, storage: str, gpu: bool, timeout_s: float = 300.0) -> dict[str, Any]:
        """Run ``worker.probe`` as a Ray job (on a GPU when ``gpu``) and return its report.

        Raises ``RuntimeError`` when the probe job does not finish or prints no report.
        """
        sid = f"shunter-doctor-{secrets.token_hex(4)}"
        env = {**DEFAULT_TRAIN_ENV, **self.config.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_SOURCE_ROOT), env.get("PYTHONPATH")) if p
        )
        self._client.submit_job(
            entrypoint=(
                f"{self.config.driver_python} -m worker.probe --storage {shlex.quote(storage)}"
            ),
            submission_id=sid,
            runtime_env={"env_vars": env},
            entrypoint_num_cpus=0,
            entrypoint_num_gpus=1 if gpu else 0,
        )
        deadline = time.monotonic() + timeout_s
        while (state := self.status(sid).state) not in _ENDED:
            if time.monotonic() > deadline:
                self.stop(sid)
                raise RuntimeError(f"probe job {sid} did not finish in {timeout_s:.0f}s")
            time.sleep(1.0)
        for line in reversed(self.logs(sid).splitlines()):
            if PROBE_PREFIX in line:
                report: dict[str, Any] = json.loads(line.split(PROBE_PREFIX, 1)[1])
                return report
        raise RuntimeError(f"probe job {sid} ended {state.value} without a report")

    # -- hang watch ---------------------------------------------------------------------
    def dump_stacks(self, targets: list[StackTarget], *, timeout_s: float) -> list[RankStack]:
        """Each target rank's stacks, dumped on its node (``worker.stack_dump``, a Ray job).

        Raises ``RuntimeError`` when the job does not finish in ``timeout_s`` or prints none.
        """
        sid = f"shunter-stacks-{secrets.token_hex(4)}"
        env = {**DEFAULT_TRAIN_ENV, **self.config.extra_env}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_SOURCE_ROOT), env.get("PYTHONPATH")) if p
        )
        env[STACK_TARGETS_ENV] = json.dumps(
            [{"rank": t.rank, "pid": t.pid, "node_id": t.node_id} for t in targets]
        )
        self._client.submit_job(
            entrypoint=f"{self.config.driver_python} -m worker.stack_dump",
            submission_id=sid,
            runtime_env={"env_vars": env},
            entrypoint_num_cpus=0,
        )
        deadline = time.monotonic() + timeout_s
        while (state := self.status(sid).state) not in _ENDED:
            if time.monotonic() > deadline:
                self.stop(sid)
                raise RuntimeError(f"stack dump job {sid} did not finish in {timeout_s:.0f}s")
            time.sleep(0.5)
        for line in reversed(self.logs(sid).splitlines()):
            if STACKS_PREFIX in line:
                got = json.loads(line.split(STACKS_PREFIX, 1)[1])
                return [
                    RankStack(
                        rank=int(r["rank"]), state=str(r["state"]), cpu_s=r["cpu_s"], text=r["text"]
                    )
                    for r in got
                ]
        raise RuntimeError(f"stack dump job {sid} ended {state.value} without stacks")

    # -- cluster ------------------------------------------------------------------------
    def cluster(self) -> ClusterResources:
        nodes = self._get("/api/v0/nodes?detail=1&limit=10000")["result"]["result"]
        status = self._get("/api/cluster_status")["clusterStatus"]
        usage: dict[str, dict[str, list[float]]] = (
            status.get("loadMetricsReport", {}).get("usageByNode") or {}
        )
        out = []
        for n in nodes:
            alive = n.get("state") == "ALIVE"
            total = n.get("resources_total") or {}
            used = usage.get(n["node_id"], {})
            cpu_used, cpu_total = used.get("CPU", [0.0, float(total.get("CPU", 0.0))])
            gpu_used, gpu_total = used.get("GPU", [0.0, float(total.get("GPU", 0.0))])
            out.append(
                NodeResources(
                    node_id=n["node_id"],
                    address=n.get("node_ip", ""),
                    alive=alive,
                    total_cpus=float(cpu_total) if alive else 0.0,
                    free_cpus=max(0.0, float(cpu_total) - float(cpu_used)) if alive else 0.0,
                    total_gpus=float(gpu_total) if alive else 0.0,
                    free_gpus=max(0.0, float(gpu_total) - float(gpu_used)) if alive else 0.0,
                )
            )
        return ClusterResources(nodes=out)

    def _get(self, path: str) -> Any:
        r = self._http.get(path)
        r.raise_for_status()
        body = r.json()
        if not body.get("result", False):
            raise RuntimeError(f"ray dashboard {path}: {body.get('msg')}")
        return body["data"]

    def close(self) -> None:
        self._http.close()
        if self.head is not None:
            self.head.stop()
            self.head = None


def start_embedded(
    temp_root: Path, *, num_cpus: int | None = None, extra_env: dict[str, str] | None = None
) -> RayLauncher:
    """Start a local head under ``temp_root`` and a launcher that stops it on ``close()``."""
    head = RayHead.start(
        RayHeadConfig(temp_root=temp_root, num_cpus=num_cpus, env=dict(DEFAULT_TRAIN_ENV))
    )
    log.info("embedded ray head at %s (dashboard %s)", head.gcs_address, head.dashboard_url)
    try:
        return RayLauncher(
            RayLauncherConfig(
                dashboard_url=head.dashboard_url,
                driver_python=sys.executable,
                extra_env=dict(extra_env or {}),
                gcs_address=head.gcs_address,
            ),
            head=head,
        )
    except BaseException:
        head.stop()
        raise


def from_settings(settings: Any) -> RayLauncher:
    """Build the launcher from ``service.settings.Settings`` (read by attribute, duck-typed).

    Uses ``ray_address`` (dashboard URL) when set; otherwise starts an embedded head under
    ``<home>/ray`` with ``ray_num_cpus`` CPUs (None = all) and stops it in ``close()``.
    """
    address = str(getattr(settings, "ray_address", "") or "")
    home = Path(str(getattr(settings, "home", None) or Path.home() / ".shunter"))
    if address:
        if not address.startswith("http"):
            address = f"http://{address}"
        gcs = str(getattr(settings, "ray_gcs_address", "") or "") or None
        env = ecosystem_env(settings, default_hf_home=None)
        return RayLauncher(RayLauncherConfig(dashboard_url=address, gcs_address=gcs, extra_env=env))
    num_cpus = getattr(settings, "ray_num_cpus", None) or os.cpu_count()
    env = ecosystem_env(settings, default_hf_home=home / "hf")
    return start_embedded(home / "ray", num_cpus=num_cpus, extra_env=env)


def ecosystem_env(settings: Any, *, default_hf_home: Path | None) -> dict[str, str]:
    """Driver/worker environment for the Hub and trackers, from the service's settings.

    ``HF_HOME``: one Hugging Face cache per node that every worker of every job shares, so a
    model downloads once per node (trainer_core.hub locks it); ``HF_HUB_OFFLINE`` is lifted
    only when the service resolved ``hub_access`` to ``on``; ``MLFLOW_TRACKING_URI`` for
    ``report_to: [mlflow]``.
    """
    env: dict[str, str] = {}
    hf_home = str(getattr(settings, "hf_home", "") or "") or (
        str(default_hf_home) if default_hf_home is not None else ""
    )
    if hf_home:
        env["HF_HOME"] = hf_home
    if getattr(settings, "hub_access", "off") == "on":
        env["HF_HUB_OFFLINE"] = "0"
    uri = str(getattr(settings, "mlflow_tracking_uri", "") or "")
    if uri:
        env["MLFLOW_TRACKING_URI"] = uri
    env.update(storage_env(settings))
    return env


def storage_env(settings: Any) -> dict[str, str]:
    """The object store's endpoint and credentials for the drivers and workers: the standard
    AWS variables of the service's environment, and ``s3_endpoint_url`` from its settings."""
    env = {name: os.environ[name] for name in STORAGE_ENV if os.environ.get(name)}
    endpoint = str(getattr(settings, "s3_endpoint_url", "") or "")
    if endpoint:
        env["SHUNTER_S3_ENDPOINT_URL"] = endpoint
    return env
