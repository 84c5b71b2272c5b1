"""Helpers for the security suite: a small valid spec and request shorthands."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))

from svc_helpers import bearer
from svc_helpers import tiny_spec as _service_tiny_spec

__all__ = ["bearer", "job_count", "set_status", "submit", "tiny_spec"]

# The service suite's small spec (tests/service/svc_helpers.py), one definition for both.
_TINY: dict[str, Any] = _service_tiny_spec()


def tiny_spec(**sections: Any) -> dict[str, Any]:
    """A spec that validates against the ``data_root`` fixture; ``sections`` merge one level
    deep (``model={...}`` updates the model section)."""
    spec = copy.deepcopy(_TINY)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def job_count(client: Any, token: str) -> int:
    r = client.get("/v1/jobs", params={"limit": 1000}, headers=bearer(token))
    assert r.status_code == 200, r.text
    return len(r.json()["data"])


def submit(client: Any, token: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    r = client.post("/v1/jobs", json=spec or tiny_spec(), headers=bearer(token))
    assert r.status_code == 201, r.text
    job: dict[str, Any] = r.json()
    return job


def set_status(db: Any, job_id: str, status: str, *, days_ago: float = 0.0) -> None:
    """Force a job's status (and finish time for terminal ones) as the scheduler would."""
    from datetime import UTC, datetime, timedelta

    from sqlalchemy import update

    from service.db.tables import Job

    finished = datetime.now(UTC) - timedelta(days=days_ago)
    terminal = status in {"succeeded", "failed", "cancelled"}
    values = {"status": status, "finished_at": finished if terminal else None}
    db.write(lambda s: s.execute(update(Job).where(Job.id == job_id).values(**values)))
