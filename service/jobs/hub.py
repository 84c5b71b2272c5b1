"""Hugging Face Hub ids and experiment trackers at submit: what the server's world allows.

``ecosystem_errors(spec, policy=..., lookup=...)`` checks, over a spec whose local paths are
already resolved (``paths.resolve_location`` keeps a model/tokenizer string that exists
nowhere locally as a hub id):

- every hub id (``model.name_or_path``, ``model.tokenizer``, ``data.train.hub``,
  ``data.eval.hub``) belongs to an allowed organisation (``policy.allowed_orgs``; empty = any);
- Hub access on: the repository exists, and a model's files total at most
  ``policy.max_model_bytes`` (``lookup`` asks the Hub);
- Hub access off: the repository must already be in the server's Hugging Face cache
  (``<hf_home>/hub/{models,datasets}--org--name/snapshots/*``, the cache the embedded head's
  workers share); otherwise the error says that Hub access is off and what to do;
- ``training.report_to`` naming ``mlflow`` needs a tracking URI on the server;
- ``health.hang`` stays inside the admin's bounds (``hang_bounds.bound_errors``).

``resolve_hub_access(setting)`` turns ``auto`` into ``on``/``off`` once at start-up.
``huggingface_hub`` is imported only when the Hub is online (it is light and optional).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from service.jobs.hang_bounds import HangBounds, bound_errors
from service.settings import Settings
from shunter.jobspec import FieldError, JobSpec
from shunter.jobspec.spec import is_store_ref

__all__ = [
    "EcosystemPolicy",
    "HfHubLookup",
    "HubLookup",
    "ecosystem_errors",
    "hub_ids",
    "in_cache",
    "policy_from_settings",
    "resolve_hub_access",
]

_PROBE_URL = "https://huggingface.co/api/models?limit=1"
_TRUTHY = {"1", "true", "yes", "on"}


@dataclass(frozen=True, kw_only=True)
class EcosystemPolicy:
    hub_online: bool
    allowed_orgs: tuple[str, ...] = ()
    hf_home: Path
    max_model_bytes: int = 200 * 1024**3
    mlflow_configured: bool = False
    # The admin's bounds on health.hang (SHUNTER_HEALTH_HANG_*), checked beside the above.
    hang_bounds: HangBounds = field(default_factory=HangBounds)


class HubLookup(Protocol):
    """The Hub questions submit asks. ``None``/``False``: no such repository."""

    def model_bytes(self, repo_id: str) -> int | None: ...

    def dataset_exists(self, repo_id: str) -> bool: ...


class HfHubLookup:
    """``HubLookup`` over ``huggingface_hub.HfApi`` (network; used only when online)."""

    def model_bytes(self, repo_id: str) -> int | None:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            info = HfApi().model_info(repo_id, files_metadata=True)
        except RepositoryNotFoundError:
            return None
        return sum(s.size or 0 for s in info.siblings or [])

    def dataset_exists(self, repo_id: str) -> bool:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import RepositoryNotFoundError

        try:
            HfApi().dataset_info(repo_id)
        except RepositoryNotFoundError:
            return False
        return True


def resolve_hub_access(setting: str, *, timeout_s: float = 3.0) -> Literal["on", "off"]:
    """``on``/``off`` as configured; ``auto``: off under ``HF_HUB_OFFLINE``, else on when the
    Hub answers within ``timeout_s``."""
    if setting == "on":
        return "on"
    if setting == "off":
        return "off"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUTHY:
        return "off"
    import httpx

    try:
        return "on" if httpx.get(_PROBE_URL, timeout=timeout_s).status_code < 500 else "off"
    except httpx.HTTPError:
        return "off"


def hub_ids(spec: JobSpec) -> list[tuple[str, str, str]]:
    """(field, kind, repo id) of every hub reference; kind is ``model`` or ``dataset``. Each
    field is listed (train and eval may name one repository: both get their error)."""
    out: list[tuple[str, str, str]] = []
    for loc in ("name_or_path", "tokenizer"):
        value = getattr(spec.model, loc)
        if value is not None and not os.path.isabs(value) and not is_store_ref(value):
            out.append((f"model.{loc}", "model", value))
    for name, source in (("train", spec.data.train), ("eval", spec.data.eval)):
        if source is not None and source.hub is not None:
            out.append((f"data.{name}.hub", "dataset", source.hub))
    return out


def ecosystem_errors(
    spec: JobSpec, *, policy: EcosystemPolicy, lookup: HubLookup | None = None
) -> list[FieldError]:
    errors: list[FieldError | None] = list(bound_errors(spec, policy.hang_bounds))
    if not policy.mlflow_configured:
        errors.append(_report_to_error(spec, policy))
    for loc, kind, repo in hub_ids(spec):
        errors.append(_org_error(loc, repo, policy) or _hub_error(loc, kind, repo, policy, lookup))
    return [e for e in errors if e is not None]


def _report_to_error(spec: JobSpec, policy: EcosystemPolicy) -> FieldError | None:
    if "mlflow" not in spec.training.report_to:
        return None
    return FieldError(
        "training.report_to",
        "mlflow needs a tracking server, and this server has none configured "
        "(SHUNTER_MLFLOW_TRACKING_URI); ask an admin to set it, or drop mlflow",
    )


def _org_error(loc: str, repo: str, policy: EcosystemPolicy) -> FieldError | None:
    if not policy.allowed_orgs:
        return None
    org = repo.split("/", 1)[0] if "/" in repo else None
    if org in policy.allowed_orgs:
        return None
    return FieldError(
        loc,
        f"hub id {repo!r} is outside the organisations this server allows "
        f"({', '.join(policy.allowed_orgs)}; SHUNTER_HUB_ALLOWED_ORGS); use one of them or a "
        "local path inside a data root",
    )


def _hub_error(
    loc: str, kind: str, repo: str, policy: EcosystemPolicy, lookup: HubLookup | None
) -> FieldError | None:
    if not policy.hub_online:
        if in_cache(policy.hf_home, kind, repo):
            return None
        return FieldError(
            loc,
            f"{repo!r} is not a local path inside a data root, and as a Hugging Face Hub id it "
            f"cannot be fetched: Hub access is off on this server (SHUNTER_HUB_ACCESS, or no "
            f"network) and {repo!r} is not in its Hugging Face cache ({policy.hf_home}); use a "
            "local path, or ask an admin to turn Hub access on or pre-fill the cache",
        )
    lookup = lookup or HfHubLookup()
    try:
        if kind == "dataset":
            found = lookup.dataset_exists(repo)
            size = None
        else:
            size = lookup.model_bytes(repo)
            found = size is not None
    except Exception as exc:  # network trouble: say so rather than a 500
        return FieldError(loc, f"could not check {repo!r} on the Hugging Face Hub: {exc}")
    if not found:
        return FieldError(loc, f"{kind} {repo!r} does not exist on the Hugging Face Hub")
    if size is not None and size > policy.max_model_bytes:
        return FieldError(
            loc,
            f"model {repo!r} is {size / 1024**3:.1f} GiB on the Hub, over this server's "
            f"limit of {policy.max_model_bytes / 1024**3:.1f} GiB",
        )
    return None


def in_cache(hf_home: Path, kind: str, repo: str) -> bool:
    """Whether the Hugging Face hub cache under ``hf_home`` holds a snapshot of ``repo``."""
    folder = hf_home / "hub" / f"{kind}s--{repo.replace('/', '--')}" / "snapshots"
    try:
        return any(any(snap.iterdir()) for snap in folder.iterdir() if snap.is_dir())
    except OSError:
        return False


def policy_from_settings(settings: Settings) -> EcosystemPolicy:
    """The submit-time policy; ``settings.hub_access`` was resolved at start-up."""
    return EcosystemPolicy(
        hub_online=settings.hub_access == "on",
        allowed_orgs=tuple(settings.hub_allowed_orgs),
        hf_home=Path(settings.hf_home) if settings.hf_home else settings.home / "hf",
        mlflow_configured=bool(settings.mlflow_tracking_uri),
        hang_bounds=HangBounds.from_settings(settings),
    )
