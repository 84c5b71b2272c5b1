"""Python client for Shunter's public API v1.

``Client`` is the entry point; responses are the typed models of :mod:`.models`; failures
raise the exceptions of :mod:`.errors` (see the tree drawn there).
"""

from __future__ import annotations

from shunter.client.client import Client, SpecInput, load_spec
from shunter.client.config import DEFAULT_URL, resolve_token, resolve_url
from shunter.client.errors import (
    APIError,
    AuthError,
    BadRequest,
    Conflict,
    ConnectionFailed,
    NotFound,
    PermissionDenied,
    ServerError,
    ShunterError,
    ValidationError,
)
from shunter.client.models import (
    TERMINAL_STATUSES,
    Checkpoint,
    Cluster,
    ClusterNode,
    DryRun,
    Event,
    IssuedToken,
    Job,
    JobError,
    MetricPoint,
    Page,
    Progress,
    QueueEntry,
    StreamEvent,
    Sweep,
    Team,
    TokenInfo,
    Trial,
    WhoAmI,
)

__all__ = [
    "DEFAULT_URL",
    "TERMINAL_STATUSES",
    "APIError",
    "AuthError",
    "BadRequest",
    "Checkpoint",
    "Client",
    "Cluster",
    "ClusterNode",
    "Conflict",
    "ConnectionFailed",
    "DryRun",
    "Event",
    "IssuedToken",
    "Job",
    "JobError",
    "MetricPoint",
    "NotFound",
    "Page",
    "PermissionDenied",
    "Progress",
    "QueueEntry",
    "ServerError",
    "ShunterError",
    "SpecInput",
    "StreamEvent",
    "Sweep",
    "Team",
    "TokenInfo",
    "Trial",
    "ValidationError",
    "WhoAmI",
    "load_spec",
    "resolve_token",
    "resolve_url",
]
