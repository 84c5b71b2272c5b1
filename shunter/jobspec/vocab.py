"""API words shared by the client, the service and the database: the one list of each.

Job statuses (and which are terminal or active), priorities and their scheduling rank.
The spec's own enums (tasks, optimizers, strategies, ...) are ``Literal`` types in
``shunter.jobspec.spec``; this module holds the words that are not spec fields but that
every reader of the API must agree on. Pure stdlib.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Literal, get_args

__all__ = [
    "ACTIVE_STATUSES",
    "EVENT_TYPES",
    "JOB_STATUSES",
    "PRIORITIES",
    "PRIORITY_RANK",
    "TERMINAL_STATUSES",
    "WEBHOOK_EVENT_TYPES",
    "EventType",
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


class EventType(enum.StrEnum):
    """Every ``type`` a job's event (``GET /v1/jobs/{id}/events``) can have: the one list that
    the writers name, the database's check constraint on ``events.type`` holds
    (``service.db.tables``) and the webhook map covers (``service.webhooks.events``)."""

    # A status move that names no type of its own has the new status as its type
    # (``service.jobs.states.transition``): every job status is an event type (A-Z here).
    CANCELLED = "cancelled"
    CANCELLING = "cancelling"
    FAILED = "failed"
    PAUSED = "paused"
    PRUNED = "pruned"
    QUEUED = "queued"
    RUNNING = "running"
    STARTING = "starting"
    SUCCEEDED = "succeeded"
    # The job's life.
    SUBMITTED = "submitted"
    BUDGET_EXCEEDED = "budget_exceeded"  # submitted over the team's budget (a warning)
    CLAIMED = "claimed"  # the scheduler claimed it: attempt + 1 starts
    PHASE = "phase"  # an attempt's start-up phase (placed, driver up, workers up, ...)
    CANCEL_REQUESTED = "cancel_requested"
    RESUMED = "resumed"  # a paused or ended job queued again
    SWEEP_TRIAL = "sweep_trial"  # a sweep's trial: which sweep and which parameters
    # An attempt that ends without the job ending.
    ATTEMPT_LOST = "attempt_lost"  # infra loss: requeued from the last checkpoint, or failed
    RAY_HEAD_LOST = "ray_head_lost"
    WORKER_RESTARTED = "worker_restarted"  # Ray Train restarted the worker group inside it
    # Checkpoint-now: a request, then the attempt stops at a step boundary.
    PREEMPTING = "preempting"  # the scheduler chose this job to make room
    PREEMPT_REQUESTED = "preempt_requested"
    PAUSE_REQUESTED = "pause_requested"
    PRUNE_REQUESTED = "prune_requested"
    PREEMPTED = "preempted"
    # An elastic job's width: started wider than min, or grown / shrunk / reclaimed (a
    # checkpoint-now stop and an attempt at the new width); the message says why and from/to.
    RESIZED = "resized"
    # Health (``service.health``).
    HUNG = "hung"
    STRAGGLER = "straggler"
    THROUGHPUT_DROPPED = "throughput_dropped"
    STEP_SKIPPED = "step_skipped"  # the divergence guard skipped an optimizer step
    ROLLED_BACK = "rolled_back"  # the divergence guard rolled back to a checkpoint


EVENT_TYPES: tuple[str, ...] = tuple(t.value for t in EventType)
