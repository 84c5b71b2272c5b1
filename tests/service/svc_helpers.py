"""Helpers for the service tests: submit a job, claim it the way the scheduler does, and
talk to the internal API as a driver would."""

from __future__ import annotations

from typing import Any

from service.accounts.auth import hash_token, new_token
from service.db.engine import Database
from service.jobs.states import claim_job

__all__ = ["bearer", "claim", "internal", "submit", "tiny_spec"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def tiny_spec(name: str = "tiny", **training: Any) -> dict[str, Any]:
    """A small spec that validates against the ``data_root`` fixture (no hub, no shared)."""
    return {
        "name": name,
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
        "training": {"max_steps": 20, "logging_steps": 1, **training},
        "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
    }


def submit(client: Any, token: str, spec: dict[str, Any] | None = None, **headers: str) -> Any:
    r = client.post("/v1/jobs", json=spec or tiny_spec(), headers={**bearer(token), **headers})
    assert r.status_code == 201, r.text
    return r.json()


def claim(db: Database, job_id: str, lease_seconds: float = 30.0) -> tuple[int, str]:
    """Claim like the scheduler: returns (attempt number, plaintext attempt token)."""
    token = new_token()
    attempt = db.write(
        lambda s: claim_job(
            s, job_id=job_id, token_hash=hash_token(token), lease_seconds=lease_seconds
        )
    )
    assert attempt is not None
    return attempt.number, token


def internal(job_id: str, attempt: int, what: str) -> str:
    return f"/v1/internal/jobs/{job_id}/attempts/{attempt}/{what}"
