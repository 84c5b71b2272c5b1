"""OpenAI files on object storage (issue #28): with ``SHUNTER_STORAGE=s3://...`` (a real
local S3 server), the official client's ``files.create`` stores the file as a dataset object
in the bucket, and ``fine_tuning.jobs.create`` queues a job whose driver payload names that
object; deleting the file keeps the bytes the job uses."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from openai import OpenAI
from s3_server import S3Server, aws_env, running_s3
from svc_helpers import bearer, claim, internal

import storage
from storage.manifest import MANIFEST

CHAT = [
    {
        "messages": [
            {"role": "user", "content": f"what is {i} plus one"},
            {"role": "assistant", "content": f"{i + 1}"},
        ]
    }
    for i in range(4)
]
CONTENT = ("\n".join(json.dumps(r) for r in CHAT) + "\n").encode()


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture
def settings(make_settings: Callable[..., Any], s3: S3Server) -> Any:
    bucket = s3.bucket("ft-" + secrets.token_hex(4))
    return make_settings(storage=f"s3://{bucket}/shunter")


def test_files_and_fine_tuning_on_s3(
    client: Any, make_token: Callable[..., str], db: Any, settings: Any
) -> None:
    token = make_token("alpha")
    c = OpenAI(base_url="http://testserver/v1", api_key=token, http_client=client)
    f = c.files.create(file=("chat.jsonl", CONTENT), purpose="fine-tune")
    assert f.bytes == len(CONTENT) and [x.id for x in c.files.list()] == [f.id]
    datasets = client.get("/v1/datasets", headers=bearer(token)).json()["data"]
    assert [(d["name"], d["rows"], d["format"]) for d in datasets] == [("chat.jsonl", 4, "jsonl")]
    obj = storage.join(settings.storage, storage.object_dir(datasets[0]["digest"]))
    assert (
        obj.startswith("s3://") and storage.read_bytes(storage.join(obj, "data.jsonl")) == CONTENT
    )

    job = c.fine_tuning.jobs.create(model="shunter-tiny-llama", training_file=f.id, seed=3)
    assert job.status == "queued" and job.training_file == f.id
    job_id = job.id.removeprefix("ftjob-")
    rows = client.get("/v1/jobs", headers=bearer(token)).json()["data"]
    job_id = next(r["id"] for r in rows)
    n, t = claim(db, job_id)
    payload = client.get(internal(job_id, n, "spec"), headers=bearer(t)).json()
    ds = datasets[0]["id"]
    assert payload["spec"]["data"]["train"] == {**payload["spec"]["data"]["train"], "dataset": ds}
    assert payload["inputs"][ds]["uri"] == obj and payload["inputs"][ds]["format"] == "jsonl"

    assert c.files.delete(f.id).deleted
    assert storage.exists(storage.join(obj, MANIFEST))  # the job still uses it
