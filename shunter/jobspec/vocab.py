"""API words shared by the client, the service and the database: the one list of each.

Job statuses (and which are terminal or active), priorities and their scheduling rank.
The spec's own enums (tasks, optimizers, strategies, ...) are ``Literal`` types in
``shunter.jobspec.models``; this module holds the words that are not spec fields but that
every reader of the API must agree on. Pure stdlib.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

__all__ = [
    "ACTIVE_STATUSES",
    "JOB_STATUSES",
    "PRIORITIES",
    "PRIORITY_RANK",
    "TERMINAL_STATUSES",
    "WEBHOOK_EVENT_TYPES",
    "JobStatusName",
    "Priority",
    "WebhookEventType",
    "priority_rank",
]

# paused: checkpointed and held on request (``POST /v1/jobs/{id}/pause``) until resumed.
# pruned: a sweep's trial its pruner stopped early (at a step boundary, checkpoint kept); an
# end, not a failure.
JobStatusName = Literal[
    "queued",
    "starting",
    "running",
    "cancelling",
    "succeeded",
    "failed",
    "cancelled",
    "paused",
    "pruned",
]
JOB_STATUSES: tuple[str, ...] = get_args(JobStatusName)
# Terminal: the job never changes again unless resumed (failed/cancelled -> queued).
TERMINAL_STATUSES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled", "pruned"})
# Active: an attempt holds (or is acquiring) cluster resources.
ACTIVE_STATUSES: frozenset[str] = frozenset({"starting", "running", "cancelling"})

Priority = Literal["low", "normal", "high"]
PRIORITIES: tuple[str, ...] = get_args(Priority)
# Scheduling order: a lower rank is placed first.
PRIORITY_RANK: Mapping[str, int] = {"high": 0, "normal": 1, "low": 2}


def priority_rank(priority: str) -> int:
    """A priority's scheduling rank (lower is placed first); an unknown one ranks as normal."""
    return PRIORITY_RANK.get(priority, PRIORITY_RANK["normal"])


# Webhook event types (``notify:`` in the spec, a team's endpoints, the deliveries).
WebhookEventType = Literal[
    "job.succeeded",
    "job.failed",
    "job.cancelled",
    "job.preempted",
    "job.hung",
    "job.diverged",
    "job.straggler",
    "job.checkpoint",
]
WEBHOOK_EVENT_TYPES: tuple[str, ...] = get_args(WebhookEventType)
