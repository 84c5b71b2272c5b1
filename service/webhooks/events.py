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
from datetime import UTC, datetime
from typing import Any

__all__ = ["EVENT_TO_WEBHOOK", "MAX_BODY_BYTES", "event_id", "payload", "webhook_type"]

# Event ``type`` (or, for the terminal moves, ``to_status``) -> webhook type. The health
# events' names are the writers' (``service.jobs.attempts``; hang and straggler detectors).
EVENT_TO_WEBHOOK: Mapping[str, str] = {
    "succeeded": "job.succeeded",
    "failed": "job.failed",
    "cancelled": "job.cancelled",
    "preempted": "job.preempted",
    "hung": "job.hung",
    "hang_detected": "job.hung",
    "rolled_back": "job.diverged",
    "diverged": "job.diverged",
    "straggler": "job.straggler",
    "throughput_dropped": "job.straggler",
    "checkpoint": "job.checkpoint",
}
_TERMINAL_TO_WEBHOOK = {"succeeded", "failed", "cancelled"}
MAX_BODY_BYTES = 8 * 1024  # a payload is small: messages are cut to fit
_MESSAGE_CHARS = 500


def webhook_type(*, event_type: str, to_status: str | None) -> str | None:
    """The webhook type an event row becomes, or None."""
    if to_status in _TERMINAL_TO_WEBHOOK:
        return EVENT_TO_WEBHOOK[to_status]
    return EVENT_TO_WEBHOOK.get(event_type)


def event_id(job_id: str, event_key: str) -> str:
    """The payload's ``id``: the same for every endpoint the event goes to."""
    return "evt_" + hashlib.sha256(f"{job_id}/{event_key}".encode()).hexdigest()[:24]


def payload(
    *,
    job: Mapping[str, Any],
    type_: str,
    event_key: str,
    created_at: datetime,
    message: str = "",
    extra: Mapping[str, Any] | None = None,
) -> str:
    """The exact JSON body (compact, keys in a fixed order). ``job`` has id, team, name,
    status, error_type, error_message, progress_step."""
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
    data.update(extra or {})
    when = created_at if created_at.tzinfo else created_at.replace(tzinfo=UTC)  # SQLite: naive
    body = {
        "id": event_id(str(job["id"]), event_key),
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
