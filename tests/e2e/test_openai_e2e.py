"""The official ``openai`` client against a fresh server on the session's Ray head: upload,
create, poll to ``succeeded``, events and checkpoints, another team's 404, cancel.

The server runs with its default data root (``$home/data``), as a fresh install does, so
the catalog's ``shunter-tiny-llama`` finds the tokenizer that home seeding linked there.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from harness import ApiServer

pytestmark = pytest.mark.slow

ROWS = [
    {
        "messages": [
            {"role": "user", "content": f"what comes after {i}"},
            {"role": "assistant", "content": f"{i + 1} comes after {i}"},
        ]
    }
    for i in range(8)
]


@pytest.fixture
def fresh(tmp_path: Path, ray_launcher: Any) -> Iterator[ApiServer]:
    home = tmp_path / "home"
    server = ApiServer(home, home / "data", ray_launcher, lease_seconds=60.0).start()
    try:
        yield server
    finally:
        server.stop_jobs()
        server.stop()


def _client(api: ApiServer, team: str) -> openai.OpenAI:
    admin = api.api()
    assert admin.post("/v1/teams", json={"name": team}).status_code in (201, 409)
    r = admin.post("/v1/tokens", json={"team": team, "role": "member", "name": f"{team}-m"})
    assert r.status_code == 201, r.text
    return openai.OpenAI(base_url=f"{api.url}/v1", api_key=r.json()["token"], max_retries=0)


def test_official_client_fine_tunes_to_succeeded(fresh: ApiServer) -> None:
    client, other = _client(fresh, "alpha"), _client(fresh, "beta")
    assert "shunter-tiny-llama" in [m.id for m in client.models.list()]
    data = "\n".join(json.dumps(r) for r in ROWS).encode()
    f = client.files.create(file=("adder.jsonl", data), purpose="fine-tune")
    job = client.fine_tuning.jobs.create(
        model="shunter-tiny-llama",
        training_file=f.id,
        validation_file=f.id,
        hyperparameters={"n_epochs": 2, "batch_size": 4},
        suffix="adder",
        seed=5,
    )
    fresh.submitted.append(job.id.removeprefix("ft"))
    # A second job, cancelled while queued or running.
    doomed = client.fine_tuning.jobs.create(model="shunter-tiny-llama", training_file=f.id)
    fresh.submitted.append(doomed.id.removeprefix("ft"))
    assert client.fine_tuning.jobs.cancel(doomed.id).status in ("running", "cancelled")

    deadline = time.monotonic() + 400
    while (job := client.fine_tuning.jobs.retrieve(job.id)).status not in (
        "succeeded",
        "failed",
        "cancelled",
    ):
        assert time.monotonic() < deadline, job
        time.sleep(1)
    assert job.status == "succeeded", job.error
    assert job.fine_tuned_model and job.fine_tuned_model.startswith("ft:shunter-tiny-llama:")
    assert job.finished_at is not None and job.finished_at >= job.created_at

    events = client.fine_tuning.jobs.list_events(job.id, limit=50).data
    assert events and "succeeded" in events[0].message  # newest first
    checkpoints = client.fine_tuning.jobs.checkpoints.list(job.id).data
    # 8 examples, batch 4, 2 epochs: a checkpoint after each epoch (steps 2 and 4).
    assert sorted(c.step_number for c in checkpoints) == [2, 4]
    assert all(c.fine_tuning_job_id == job.id for c in checkpoints)
    assert all("valid_loss" in (c.metrics.model_dump(exclude_none=True)) for c in checkpoints)
    assert job.fine_tuned_model in [m.id for m in client.models.list()]

    with pytest.raises(openai.NotFoundError):
        other.fine_tuning.jobs.retrieve(job.id)
    with pytest.raises(openai.NotFoundError):
        other.fine_tuning.jobs.list_events(job.id)
    deadline = time.monotonic() + 120
    while client.fine_tuning.jobs.retrieve(doomed.id).status != "cancelled":
        assert time.monotonic() < deadline
        time.sleep(1)
