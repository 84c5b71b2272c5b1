"""Which job events become which webhook types, and the payload of one (pure).

An event row (``events``) whose ``type`` or ``to_status`` is in ``EVENT_TO_WEBHOOK`` becomes
a webhook of that type; a checkpoint (no event row) becomes ``job.checkpoint``. The payload
is small and names only the job's own team:
``{"id": "evt_...", "type": "job.failed", "created_at": <unix s>, "data": {"id": <job>,
"status": ..., "team": ..., "name": ..., ...}}``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shunter.jobspec.vocab import EventType, WebhookEventType

__all__ = [
    "EVENT_TO_WEBHOOK",
    "MAX_BODY_BYTES",
    "WebhookEvent",
    "event_id",
    "payload",
    "webhook_type",
]

# Every event type -> the webhook it becomes, or None (no webhook): total over ``EventType``
# (a test holds it), so a new type must say here whether it notifies. A terminal move
# notifies by its ``to_status`` whatever its type (``webhook_type``). A checkpoint has no
# event row: its ``job.checkpoint`` is queued where it is registered.
E = EventType
EVENT_TO_WEBHOOK: Mapping[EventType, WebhookEventType | None] = {
    E.QUEUED: None,
    E.STARTING: None,
    E.RUNNING: None,
    E.CANCELLING: None,
    E.SUCCEEDED: "job.succeeded",
    E.FAILED: "job.failed",
    E.CANCELLED: "job.cancelled",
    E.PAUSED: None,
    E.PRUNED: None,
    E.SUBMITTED: None,
    E.BUDGET_EXCEEDED: None,
    E.CLAIMED: None,
    E.PHASE: None,
    E.CANCEL_REQUESTED: None,
    E.RESUMED: None,
    E.SWEEP_TRIAL: None,
    E.ATTEMPT_LOST: None,
    E.RAY_HEAD_LOST: None,
    E.WORKER_RESTARTED: None,
    E.PREEMPTING: None,
    E.PREEMPT_REQUESTED: None,
    E.PAUSE_REQUESTED: None,
    E.PRUNE_REQUESTED: None,
    E.PREEMPTED: "job.preempted",
    E.RESIZED: None,
    E.HUNG: "job.hung",
    E.STRAGGLER: "job.straggler",
    E.THROUGHPUT_DROPPED: "job.straggler",
    E.STEP_SKIPPED: None,
    E.ROLLED_BACK: "job.diverged",
}
_TERMINAL_TO_WEBHOOK = {"succeeded", "failed", "cancelled"}
MAX_BODY_BYTES = 8 * 1024  # a payload is small: messages are cut to fit
_MESSAGE_CHARS = 500


def webhook_type(*, event_type: str, to_status: str | None) -> str | None:
    """The webhook type an event row becomes, or None."""
    if to_status in _TERMINAL_TO_WEBHOOK:
        return EVENT_TO_WEBHOOK[EventType(to_status)]
    return EVENT_TO_WEBHOOK[EventType(event_type)]


def event_id(job_id: str, event_key: str) -> str:
    """The payload's ``id``: the same for every endpoint the event goes to."""
    return "evt_" + hashlib.sha256(f"{job_id}/{event_key}".encode()).hexdigest()[:24]


@dataclass(frozen=True, kw_only=True)
class WebhookEvent:
    """One event of a job to notify: its webhook type, its key (an endpoint is sent one
    event key once), when it happened, a message and ``extra`` fields of its ``data``."""

    type_: str
    event_key: str
    created_at: datetime
    message: str = ""
    extra: Mapping[str, Any] | None = None


def payload(*, job: Mapping[str, Any], webhook: WebhookEvent) -> str:
    """The exact JSON body (compact, keys in a fixed order). ``job`` has id, team, name,
    status, error_type, error_message, progress_step."""
    type_, message, created_at = webhook.type_, webhook.message, webhook.created_at
    data: dict[str, Any] = {
        "id": job["id"],
        "object": "job",
        "status": job["status"],
        "team": job["team"],
        "name": job["name"],
    }
    if job.get("progress_step") is not None:
        data["step"] = job["progress_step"]
    if job.get("error_type") and type_ != "job.succeeded":
        data["error"] = {
            "type": job["error_type"],
            "message": str(job.get("error_message") or "")[:_MESSAGE_CHARS],
        }
    if message:
        data["message"] = message[:_MESSAGE_CHARS]
    data.update(webhook.extra or {})
    when = created_at if created_at.tzinfo else created_at.replace(tzinfo=UTC)  # SQLite: naive
    body = {
        "id": event_id(str(job["id"]), webhook.event_key),
        "type": type_,
        "created_at": int(when.timestamp()),
        "object": "event",
        "data": data,
    }
    text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    if len(text.encode()) > MAX_BODY_BYTES:  # only a huge extra could do this
        data.pop("message", None)
        data.pop("error", None)
        text = json.dumps(body, separators=(",", ":"), allow_nan=False)
    return text
