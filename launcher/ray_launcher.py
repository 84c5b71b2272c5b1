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

import contextlib
import json
import logging
import os
import re
import secrets
import shlex
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import requests
from ray.job_submission import JobStatus, JobSubmissionClient

from launcher.ray_head import RayHead, RayHeadConfig, RayHeadError
from service.launch import (
    ClusterResources,
    ClusterUnavailable,
    LaunchRequest,
    LaunchState,
    LaunchStatus,
    NodeResources,
    RankStack,
    StackTarget,
)
from service.policy.accelerators import type_of_resources
from shunter.wire import (
    ONLY_NODES_ENV,
    PROBE_PREFIX,
    RAY_GCS_ADDRESS_ENV,
    STACK_TARGETS_ENV,
    STACKS_PREFIX,
    attempt_env,
)
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

# The SDK's RuntimeError for an HTTP answer: "Request failed with status code 503: ...".
_SDK_STATUS = re.compile(r"status code (\d{3})")
# Answers of a head that is starting or whose GCS is away (the dashboard is up, its GCS not).
_AWAY_STATUSES = frozenset({500, 502, 503, 504})


def _is_away(e: BaseException) -> bool:
    """Whether ``e`` says the head does not answer (rather than a refusal of the request)."""
    away = (requests.ConnectionError, requests.Timeout, httpx.TransportError, ConnectionError)
    if isinstance(e, (*away, TimeoutError)):
        return True
    if isinstance(e, httpx.HTTPStatusError):
        return e.response.status_code in _AWAY_STATUSES
    if isinstance(e, RuntimeError) and not isinstance(e, ClusterUnavailable):
        m = _SDK_STATUS.search(str(e))
        return m is not None and int(m.group(1)) in _AWAY_STATUSES
    return False


@contextlib.contextmanager
def _head(what: str) -> Iterator[None]:
    """Turn "the head does not answer" into ``ClusterUnavailable`` (typed, one line)."""
    try:
        yield
    except Exception as e:
        if _is_away(e):
            raise ClusterUnavailable(
                f"ray head unavailable ({what}): {type(e).__name__}: {e}"
            ) from e
        raise


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
    """Launcher on a Ray cluster's job API. Thread-safe for the scheduler + API threads.

    A head that does not answer (killed, restarting, its GCS away) makes every call raise
    ``service.launch.ClusterUnavailable``; nothing is cached, so the calls work again as soon
    as a head answers at the same address (a restarted pod, the embedded head restarted).
    The embedded head, when it died, is started again by ``cluster()`` (the scheduler's
    every tick): same address, same Redis when GCS fault tolerance is on.
    """

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
        self._revive_lock = threading.Lock()
        self.head_restarts = 0  # times this launcher started its embedded head again

    # -- submit / status / stop / logs --------------------------------------------------
    def runtime_env(self, req: LaunchRequest) -> dict[str, Any]:
        env = {
            **DEFAULT_TRAIN_ENV,
            **self.config.extra_env,
            **attempt_env(
                api_url=req.api_url,
                token=req.attempt_token,
                job_id=req.job_id,
                attempt=req.attempt,
            ),
        }
        if self.config.gcs_address:
            # RAY_ADDRESS for the processes that read it before the driver runs;
            # SHUNTER_RAY_GCS_ADDRESS because the supervisor overwrites RAY_ADDRESS.
            env["RAY_ADDRESS"] = env[RAY_GCS_ADDRESS_ENV] = self.config.gcs_address
        if req.only_nodes:  # the accelerator type's nodes (worker.driver's label selector)
            env[ONLY_NODES_ENV] = ",".join(req.only_nodes)
        pythonpath = os.pathsep.join(p for p in (str(_SOURCE_ROOT), env.get("PYTHONPATH")) if p)
        env["PYTHONPATH"] = pythonpath
        return {"env_vars": env}

    def submit(self, req: LaunchRequest) -> None:
        """Start the attempt's driver. Raises when Ray refuses (e.g. the id already exists)."""
        with _head("submit"):
            self._submit(req)

    def _submit(self, req: LaunchRequest) -> None:
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
            with _head("status"):
                info = self._client.get_job_info(submission_id)
        except ClusterUnavailable:
            raise
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
        with _head("statuses"):
            listed = self._client.list_jobs()
        known = {
            job.submission_id: LaunchStatus(state=_STATE[job.status], message=job.message or "")
            for job in listed
            if job.submission_id
        }
        unknown = LaunchStatus(state=LaunchState.UNKNOWN, message="no such job in Ray")
        return {sid: known.get(sid, unknown) for sid in submission_ids}

    def stop(self, submission_id: str) -> None:
        """Ask Ray to stop the job (SIGTERM, then SIGKILL to the driver; its actors die)."""
        try:
            with _head("stop"):
                self._client.stop_job(submission_id)
        except ClusterUnavailable:
            raise
        except RuntimeError as e:
            if "404" not in str(e) and "does not exist" not in str(e):
                raise

    def logs(self, submission_id: str, tail: int | None = None) -> str:
        """The driver's log, which carries the workers' output too (Ray's log_to_driver)."""
        try:
            with _head("logs"):
                text: str = self._client.get_job_logs(submission_id)
        except ClusterUnavailable:
            raise
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
        report: dict[str, Any] = self._helper_job(
            ("doctor", "probe", "a report"),
            f"worker.probe --storage {shlex.quote(storage)}",
            prefix=PROBE_PREFIX,
            timeout_s=timeout_s,
            poll_s=1.0,
            gpus=1 if gpu else 0,
        )
        return report

    # -- hang watch ---------------------------------------------------------------------
    def dump_stacks(self, targets: list[StackTarget], *, timeout_s: float) -> list[RankStack]:
        """Each target rank's stacks, dumped on its node (``worker.stack_dump``, a Ray job).

        Raises ``RuntimeError`` when the job does not finish in ``timeout_s`` or prints none.
        """
        got = self._helper_job(
            ("stacks", "stack dump", "stacks"),
            "worker.stack_dump",
            prefix=STACKS_PREFIX,
            timeout_s=timeout_s,
            poll_s=0.5,
            env={
                STACK_TARGETS_ENV: json.dumps(
                    [{"rank": t.rank, "pid": t.pid, "node_id": t.node_id} for t in targets]
                )
            },
        )
        return [
            RankStack(rank=int(r["rank"]), state=str(r["state"]), cpu_s=r["cpu_s"], text=r["text"])
            for r in got
        ]

    def _helper_job(
        self,
        names: tuple[str, str, str],
        module_args: str,
        *,
        prefix: str,
        timeout_s: float,
        poll_s: float,
        gpus: int | None = None,
        env: dict[str, str] | None = None,
    ) -> Any:
        """Run ``<driver python> -m <module_args>`` as a short Ray job with the train
        environment (our source root on ``PYTHONPATH``), wait for it to end and return the JSON
        its output printed after ``prefix`` (the last such line). ``RuntimeError`` when it does
        not end in ``timeout_s`` (it is stopped) or prints no such line. ``names``: the
        submission id's stem, the job and its output in words (for the errors)."""
        stem, what, output = names
        sid = f"shunter-{stem}-{secrets.token_hex(4)}"
        job_env = {**DEFAULT_TRAIN_ENV, **self.config.extra_env}
        job_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_SOURCE_ROOT), job_env.get("PYTHONPATH")) if p
        )
        job_env.update(env or {})
        resources: dict[str, Any] = {"entrypoint_num_cpus": 0}
        if gpus is not None:
            resources["entrypoint_num_gpus"] = gpus
        self._client.submit_job(
            entrypoint=f"{self.config.driver_python} -m {module_args}",
            submission_id=sid,
            runtime_env={"env_vars": job_env},
            **resources,
        )
        deadline = time.monotonic() + timeout_s
        while (state := self.status(sid).state) not in _ENDED:
            if time.monotonic() > deadline:
                self.stop(sid)
                raise RuntimeError(f"{what} job {sid} did not finish in {timeout_s:.0f}s")
            time.sleep(poll_s)
        for line in reversed(self.logs(sid).splitlines()):
            if prefix in line:
                return json.loads(line.split(prefix, 1)[1])
        raise RuntimeError(f"{what} job {sid} ended {state.value} without {output}")

    # -- cluster ------------------------------------------------------------------------
    def cluster(self) -> ClusterResources:
        """The nodes and their free resources. When the head does not answer and it is our
        embedded head that died, start it again first (``_revive``)."""
        try:
            return self._cluster()
        except ClusterUnavailable:
            if not self._revive():
                raise
            return self._cluster()

    def _revive(self) -> bool:
        """Start the embedded head again if it died; whether a head should answer now."""
        head = self.head
        if head is None or head.alive():
            return False
        with self._revive_lock:
            if self.head is not head:  # closed meanwhile
                return False
            if head.alive():
                return True
            log.warning("the embedded ray head died; starting it again at %s", head.gcs_address)
            try:
                head.restart()
            except RayHeadError as e:
                log.error("the embedded ray head did not start again: %s", str(e)[-500:])
                return False
            self.head_restarts += 1
            log.warning("the embedded ray head is back at %s", head.gcs_address)
        return True

    def _cluster(self) -> ClusterResources:
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
                    accelerator=type_of_resources(total),
                    node_group=str((n.get("labels") or {}).get("ray.io/node-group", "")),
                )
            )
        return ClusterResources(nodes=out)

    def _get(self, path: str) -> Any:
        with _head("cluster"):
            r = self._http.get(path)
            r.raise_for_status()
        body = r.json()
        if not body.get("result", False):
            raise RuntimeError(f"ray dashboard {path}: {body.get('msg')}")
        return body["data"]

    def close(self) -> None:
        self._http.close()
        with self._revive_lock:  # a revive in flight finishes first; none starts after
            head, self.head = self.head, None
        if head is not None:
            head.stop()


def start_embedded(
    temp_root: Path,
    *,
    num_cpus: int | None = None,
    extra_env: dict[str, str] | None = None,
    redis_address: str | None = None,
    redis_password: str | None = None,
    storage_namespace: str | None = None,
) -> RayLauncher:
    """Start a local head under ``temp_root`` and a launcher that stops it on ``close()``.
    ``redis_address``: GCS fault tolerance (``launcher.ray_head``)."""
    head = RayHead.start(
        RayHeadConfig(
            temp_root=temp_root,
            num_cpus=num_cpus,
            env=dict(DEFAULT_TRAIN_ENV),
            redis_address=redis_address,
            redis_password=redis_password,
            storage_namespace=storage_namespace,
        )
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
    ``<home>/ray`` with ``ray_num_cpus`` CPUs (None = all) and stops it in ``close()``; with
    ``ray_redis_address`` its GCS persists to that Redis (GCS fault tolerance).
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
    return start_embedded(
        home / "ray",
        num_cpus=num_cpus,
        extra_env=env,
        redis_address=str(getattr(settings, "ray_redis_address", "") or "") or None,
        redis_password=str(getattr(settings, "ray_redis_password", "") or "") or None,
        storage_namespace=str(getattr(settings, "ray_storage_namespace", "") or "") or None,
    )


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
