"""Service settings: one pydantic-settings class read from ``SHUNTER_*`` environment variables.

Paths that default "under home" are derived from ``home`` after loading, so setting only
``SHUNTER_HOME`` moves the database, data root and storage together.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    """Everything the service reads from the environment (prefix ``SHUNTER_``)."""

    model_config = SettingsConfigDict(env_prefix="SHUNTER_", extra="ignore")

    home: Path = Path(".shunter")
    # Empty means "sqlite file at $home/shunter.db" (embedded mode, migrated on start).
    database_url: str = ""
    # Colon-separated in the environment; local spec paths must resolve inside one of these.
    data_roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # Where job output dirs (checkpoints, final model) live: a path or s3://... URI.
    storage: str = ""
    ray_address: str = ""  # empty = the launcher starts an embedded Ray head
    launcher: str = "worker.launcher:from_settings"  # "memory" = InMemoryLauncher
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str = ""  # how drivers reach the API; default http://host:port

    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)
    lease_seconds: float = Field(default=30.0, gt=0)
    # Infra losses (expired leases) of one job requeued before it fails retries_exhausted.
    max_infra_retries: int = Field(default=3, ge=0)
    scheduler_interval_s: float = Field(default=1.0, gt=0)
    run_scheduler: bool = True
    migrate_on_start: bool | None = None  # None = only for the embedded SQLite database
    create_admin_token: bool = True
    auth_cache_seconds: float = Field(default=2.0, ge=0)

    page_limit_default: int = Field(default=50, ge=1)
    page_limit_max: int = Field(default=1000, ge=1)
    sse_poll_seconds: float = Field(default=0.5, gt=0)
    logs_tail_max: int = Field(default=10_000, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _split_roots(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("data_roots"), str):
            raw = data["data_roots"]
            data = {**data, "data_roots": [p for p in raw.split(":") if p]}
        return data

    @model_validator(mode="after")
    def _derive_defaults(self) -> Settings:
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
