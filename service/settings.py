"""Service settings: one pydantic-settings class read from ``SHUNTER_*`` environment variables.

Paths that default "under home" are derived from ``home`` after loading, so setting only
``SHUNTER_HOME`` moves the database, data root and storage together.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from storage import storage_error

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["Settings", "settings_group"]

_G = TypeVar("_G", bound="DataclassInstance")

# The list settings and their separator in the environment: data roots are a PATH-like
# colon-separated list, the others comma-separated.
_ENV_LISTS = {
    "data_roots": ":",
    "data_buckets": ",",
    "hub_allowed_orgs": ",",
    "webhook_allow": ",",
    "webhook_retry_delays_s": ",",
}


class Settings(BaseSettings):
    """Everything the service reads from the environment (prefix ``SHUNTER_``)."""

    model_config = SettingsConfigDict(env_prefix="SHUNTER_", extra="ignore")

    home: Path = Path(".shunter")
    # Empty means "sqlite file at $home/shunter.db" (embedded mode, migrated on start).
    database_url: str = ""
    # Colon-separated in the environment; local spec paths must resolve inside one of these.
    data_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # Where job output dirs (checkpoints, final model) live: a local path, which on a multi-node
    # cluster must be a shared filesystem mounted at the same path on the API and every Ray
    # node (NFS, CephFS, a ReadWriteMany volume); or an S3-compatible bucket, s3://bucket/prefix
    # (credentials from the standard AWS_* environment, passed on to the Ray jobs).
    storage: str = ""
    # Buckets a spec's data.*.uri / model.name_or_path may name as s3://bucket/... (comma-
    # separated; read with the server's credentials, never the spec's). Empty: none, but the
    # storage bucket's own objects are always reachable as ds-/mdl- ids.
    data_buckets: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # The S3 endpoint of a self-hosted store (MinIO, Ceph RGW); AWS_ENDPOINT_URL works too.
    s3_endpoint_url: str = ""
    ray_address: str = ""  # empty = the launcher starts an embedded Ray head
    # GCS fault tolerance of the embedded head: host:port of a Redis its GCS persists to
    # (empty = in memory), its password, and this cluster's key namespace in it.
    ray_redis_address: str = ""
    ray_redis_password: str = Field(default="", repr=False)
    ray_storage_namespace: str = "shunter"
    launcher: str = "ray"  # an entry point of shunter.launchers; "memory" = InMemoryLauncher
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str = ""  # how drivers reach the API; default http://host:port

    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    # POST /v1/files (fine-tuning JSONL uploads) may be larger than any other body.
    max_upload_bytes: int = Field(default=512 * 1024 * 1024, ge=1024)
    # POST /v1/datasets and POST /v1/models (a base model's weights): one upload's bytes.
    max_object_bytes: int = Field(default=200 * 1024**3, ge=1024)
    # JSON/YAML file of extra models for /v1/models (service.openai.catalog); None = built-ins.
    model_catalog: Path | None = None
    lease_seconds: float = Field(default=30.0, gt=0)
    # An expired lease whose driver Ray still reports running (a worker cut off from the API,
    # the database away: heartbeats could not land) is held this much longer before the
    # attempt is lost (service.scheduler.loop, docs/reliability.md).
    lease_grace_s: float = Field(default=90.0, ge=0)
    # Infra losses (expired leases) of one job requeued before it fails retries_exhausted.
    max_infra_retries: int = Field(default=3, ge=0)
    scheduler_interval_s: float = Field(default=1.0, gt=0)
    # Bounded work per tick (Slurm's bf_max_job_test): the leader places, explains and
    # estimates the first this many queued jobs in policy order; deeper ones keep their last
    # position, reason and ETA, marked stale, until a later tick reaches them.
    scheduler_max_plan_depth: int = Field(default=500, ge=1)
    # The scheduler leader's lease (service.scheduler.leader): a dead leader is replaced
    # within this many seconds (plus a tick) by another process on the same database.
    scheduler_lease_s: float = Field(default=15.0, gt=0)
    run_scheduler: bool = True
    # The sweep controller (service.sweeps.controller; runs where the scheduler does, one
    # process at a time under its own lease): how often it samples and prunes.
    sweep_interval_s: float = Field(default=2.0, gt=0)
    # Preemption and fair share (issue 11). A job runs at least preempt_min_runtime_s before it
    # may be preempted; a victim that has not checkpointed preempt_checkpoint_timeout_s after
    # the request is stopped and resumes from its last verified checkpoint. A team under its
    # share may preempt only after waiting fairshare_grace_s; usage decays with the half-life.
    preempt_min_runtime_s: float = Field(default=300.0, ge=0)
    preempt_checkpoint_timeout_s: float = Field(default=120.0, gt=0)
    fairshare_grace_s: float = Field(default=600.0, ge=0)
    fairshare_half_life_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    # Hang watch (issue 23, service.health.hang): the bounds a spec's health.hang must keep
    # (a spec outside them is a 422 naming the field), and how long a stack dump may take.
    health_hang_factor_min: float = Field(default=3.0, ge=1)
    health_hang_factor_max: float = Field(default=1000.0, ge=1)
    health_hang_floor_min_s: float = Field(default=60.0, ge=1)
    health_hang_floor_max_s: float = Field(default=86_400.0, ge=1)
    health_hang_startup_min_s: float = Field(default=120.0, ge=1)
    health_hang_startup_max_s: float = Field(default=86_400.0, ge=1)
    health_hang_dump_timeout_s: float = Field(default=60.0, gt=0)
    # Straggler watch (issue 23, service.health.straggler): a node named by this many
    # ``straggler`` events is cordoned (no placement on it) for straggler_cordon_seconds;
    # 0 = never cordon (the events and metrics still come).
    straggler_cordon_after: int = Field(default=0, ge=0)
    straggler_cordon_seconds: float = Field(default=3600.0, gt=0)
    migrate_on_start: bool | None = None  # None = only for the embedded SQLite database
    create_admin_token: bool = True
    # The first admin token's plaintext (a deployment's Secret); empty = generate one.
    admin_token: str = Field(default="", repr=False)
    # The configured Ray cluster's GCS address (host:port): the driver connects there
    # explicitly instead of relying on Ray's address detection. Empty with ray_address set:
    # the driver uses the address Ray's job supervisor gives it.
    ray_gcs_address: str = ""
    auth_cache_seconds: float = Field(default=2.0, ge=0)
    # Threads per API process that read polled jobs (service/http/job_poll.py). One keeps the
    # tail short (more threads only add GIL hand-offs: p99 54 ms with 1, 96 ms with 2 on the
    # bench); raise it when the database is far away (each read then waits a round trip).
    poll_threads: int = Field(default=1, ge=1, le=64)
    # Admin-only: accept model folders whose weights are pickle files (.bin), which can run
    # code when loaded. Set it on the service and on the Ray nodes (trainer_core reads it).
    allow_pickle_weights: bool = False
    # One GPU's memory in bytes, for a dry run's ``fits`` (POST /v1/jobs?dry_run=true);
    # None = unknown, fits is then null.
    gpu_memory_bytes: int | None = Field(default=None, ge=1)
    # Accelerator types (issue 30, docs/scheduling.md#gpu-types): per type its card memory
    # (GB; Ray's common names are known) and the weight its GPU-hours count with in budgets
    # and usage: {"h100": {"memory_gb": 80, "weight": 2}}. JSON in the environment.
    accelerator_types: dict[str, dict[str, float]] = Field(default_factory=dict)
    # A node's type over what Ray says (its accelerator_type:<T> resource), by Ray node group
    # (the ray.io/node-group label), node address or node id: {"gpu-pool-a": "a100-40g"}.
    node_group_accelerators: dict[str, str] = Field(default_factory=dict)
    # Per-token limit on mutating calls (POST/PUT/PATCH/DELETE, /v1/internal exempt), per
    # API process: sustained calls per minute (0 = off) and the burst allowed at once.
    rate_limit_per_minute: float = Field(default=600.0, ge=0)
    rate_limit_burst: int = Field(default=120, ge=1)
    # GET /v1/jobs?include=spec: page size cap (specs are up to max_body_bytes each).
    spec_page_limit_max: int = Field(default=20, ge=1)
    # SSE: concurrent streams per token (per API process), and how often a stream re-checks
    # its token in the database (a revoked token's stream ends within this).
    sse_max_streams_per_token: int = Field(default=4, ge=1)
    sse_token_recheck_seconds: float = Field(default=30.0, gt=0)

    page_limit_default: int = Field(default=50, ge=1)
    page_limit_max: int = Field(default=1000, ge=1)
    sse_poll_seconds: float = Field(default=0.5, gt=0)
    # Durable logs (service.jobs.logs): per-job cap over all attempts (oldest output rotated
    # out), the largest page GET .../logs returns, and how long after its attempt ended a
    # driver may still ship its last output.
    log_cap_bytes: int = Field(default=50 * 1024 * 1024, ge=4096)
    log_page_max_bytes: int = Field(default=1024 * 1024, ge=1024)
    log_grace_seconds: float = Field(default=120.0, ge=0)

    # Ecosystem (issue 12). MLflow tracking URI handed to the workers as MLFLOW_TRACKING_URI
    # for `training.report_to: [mlflow]`; empty = such specs are refused at submit.
    mlflow_tracking_uri: str = ""
    # Hugging Face Hub: "auto" = on when huggingface.co answers at start-up (and
    # HF_HUB_OFFLINE is not set), "on", "off". hub_allowed_orgs (comma-separated; empty = any)
    # limits hub ids to those organisations ("org/name"; a bare "name" has no org and passes
    # only when the list is empty). hf_home: the per-node Hugging Face cache the workers share
    # (HF_HOME; one download per node); empty = <home>/hf for the embedded head, the nodes' own
    # HF_HOME on an external cluster.
    hub_access: Literal["auto", "on", "off"] = "auto"
    hub_allowed_orgs: Annotated[list[str], NoDecode] = Field(default_factory=list)
    hf_home: str = ""
    # Step-checkpoint downloads (service.jobs.checkpoint_models) consolidate a checkpoint into a
    # model once, in a child process ``<export_python> -m trainer_core export-checkpoint``:
    # a Python with shunter[train] (torch); empty = this interpreter. Bounded in time.
    export_python: str = ""
    export_timeout_seconds: float = Field(default=1800.0, gt=0)

    # Webhooks (service.webhooks). webhook_allow: addresses or CIDR networks (comma-separated)
    # a webhook URL may resolve to although private/loopback/link-local (SSRF guard), e.g.
    # "127.0.0.1,10.0.0.0/8". Each attempt is bounded in time (seconds, connect to last
    # byte) and in the answer read (bytes); the delivery worker runs in every API process
    # with deliver_webhooks on and polls every webhook_interval_s (rows are claimed, so two
    # processes never send one at once). An endpoint is disabled after
    # webhook_disable_after_failures consecutive failures spanning webhook_disable_after_s;
    # a rotated secret keeps signing for webhook_rotation_grace_s.
    webhook_allow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=60)
    webhook_max_response_bytes: int = Field(default=64 * 1024, ge=0)
    deliver_webhooks: bool = True
    webhook_interval_s: float = Field(default=1.0, gt=0)
    webhook_disable_after_failures: int = Field(default=20, ge=1)
    webhook_disable_after_s: float = Field(default=24 * 3600.0, ge=0)
    webhook_rotation_grace_s: float = Field(default=24 * 3600.0, ge=0)
    # Delivered and failed deliveries are deleted this long after they were created.
    webhook_keep_s: float = Field(default=30 * 24 * 3600.0, gt=0)
    # Seconds before retry 1, 2, ... (comma-separated); empty = the Standard Webhooks
    # schedule continued to 72 h (service.webhooks.retry.RETRY_DELAYS_S).
    webhook_retry_delays_s: Annotated[list[float], NoDecode] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _split_lists(cls, data: Any) -> Any:
        """The list settings as the environment gives them: one string, split (blanks out)."""
        if not isinstance(data, dict):
            return data
        return {
            **data,
            **{
                name: [part for part in (p.strip() for p in data[name].split(sep)) if part]
                for name, sep in _ENV_LISTS.items()
                if isinstance(data.get(name), str)
            },
        }

    @model_validator(mode="after")
    def _derive_defaults(self) -> Settings:
        if self.admin_token and not (
            self.admin_token.startswith("shn_") and len(self.admin_token) >= 36
        ):
            raise ValueError(
                "SHUNTER_ADMIN_TOKEN must be 'shn_' and at least 32 random characters, e.g."
                " shn_$(openssl rand -hex 24); or leave it unset to generate one"
            )
        for entry in self.webhook_allow:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"SHUNTER_WEBHOOK_ALLOW: {entry!r} is not an address or a CIDR network,"
                    " e.g. 127.0.0.1 or 10.0.0.0/8"
                ) from None
        if (problem := storage_error(self.storage)) is not None:
            raise ValueError(f"SHUNTER_STORAGE: {problem}")
        self.storage = self.storage.rstrip("/") if "://" in self.storage else self.storage
        home = self.home.expanduser().resolve()
        self.home = home
        if not self.database_url:
            self.database_url = f"sqlite:///{home / 'shunter.db'}"
        if not self.data_roots:
            self.data_roots = [home / "data"]
        self.data_roots = [Path(p).expanduser().resolve() for p in self.data_roots]
        if not self.storage:
            self.storage = str(home / "storage")
        if not self.public_url:
            self.public_url = f"http://{self.host}:{self.port}"
        return self

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def should_migrate_on_start(self) -> bool:
        if self.migrate_on_start is None:
            return self.is_sqlite
        return self.migrate_on_start

    @property
    def admin_token_path(self) -> Path:
        return self.home / "admin.token"


def settings_group(cls: type[_G], settings: Settings, prefix: str) -> _G:
    """The dataclass ``cls`` filled from the settings named ``prefix`` + each field's name,
    e.g. ``CordonPolicy`` (``after``, ``seconds``) from ``straggler_cordon_after`` and
    ``straggler_cordon_seconds``."""
    return cls(**{f.name: getattr(settings, prefix + f.name) for f in dataclasses.fields(cls)})
