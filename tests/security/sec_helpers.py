"""Helpers for the security suite: a small valid spec and request shorthands."""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["bearer", "job_count", "set_status", "submit", "tiny_spec"]

_TINY: dict[str, Any] = {
    "name": "tiny",
    "model": {
        "from_scratch": True,
        "task": "sequence-classification",
        "num_labels": 2,
        "tokenizer": "models/all-MiniLM-L6-v2",  # linked into home/data on start
        "config_overrides": {
            "model_type": "bert",
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "intermediate_size": 64,
        },
    },
    "data": {
        "train": {"path": "train.tsv", "format": "csv", "delimiter": "\t"},
        "text_field": "sentence",
        "label_field": "label",
    },
    "training": {"max_steps": 20, "logging_steps": 1},
    "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
}


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


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


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

    from service.db.models import Job

    finished = datetime.now(UTC) - timedelta(days=days_ago)
    terminal = status in {"succeeded", "failed", "cancelled"}
    values = {"status": status, "finished_at": finished if terminal else None}
    db.write(lambda s: s.execute(update(Job).where(Job.id == job_id).values(**values)))
