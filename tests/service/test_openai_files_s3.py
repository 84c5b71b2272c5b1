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
from svc_helpers import bearer, claim, internal, tiny_spec

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


@pytest.fixture
def data_bucket(s3: S3Server) -> str:
    return s3.bucket("data-" + secrets.token_hex(4))


def test_bucket_uris_are_checked_at_submit(
    make_settings: Callable[..., Any],
    s3: S3Server,
    data_bucket: str,
    tmp_path: Any,
) -> None:
    """``data.train.uri`` must lie in a bucket the server allows (SHUNTER_DATA_BUCKETS) and
    match files; a parquet's columns are checked; the job's inputs list the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from service.app import create_app

    pq.write_table(pa.table({"sentence": ["a", "b"], "label": [0, 1]}), tmp_path / "p.parquet")
    for name in ("a.parquet", "b.parquet"):
        storage.write_bytes(
            f"s3://{data_bucket}/films/{name}", (tmp_path / "p.parquet").read_bytes()
        )
    other = s3.bucket("other-" + secrets.token_hex(4))
    storage.write_bytes(f"s3://{other}/films/a.parquet", (tmp_path / "p.parquet").read_bytes())
    allowed = make_settings(storage=f"s3://{other}-x/shunter", data_buckets=[data_bucket])
    from fastapi.testclient import TestClient

    from service.launch import InMemoryLauncher

    with TestClient(create_app(allowed, launcher=InMemoryLauncher())) as c2:
        admin = allowed.admin_token_path.read_text().strip()

        def spec(uri: str, **data: Any) -> dict[str, Any]:
            s = tiny_spec("uri")
            s["data"] = {
                "train": {"uri": uri},
                "text_field": "sentence",
                "label_field": "label",
                **data,
            }
            return s

        r = c2.post("/v1/jobs", json=spec(f"s3://{other}/films/*.parquet"), headers=bearer(admin))
        assert r.status_code == 422 and f"bucket {other!r} is not one" in r.text, r.text
        r = c2.post(
            "/v1/jobs", json=spec(f"s3://{data_bucket}/nothing/*.parquet"), headers=bearer(admin)
        )
        assert r.status_code == 422 and "no files match" in r.text, r.text
        uri = f"s3://{data_bucket}/films/*.parquet"
        r = c2.post("/v1/jobs", json=spec(uri, label_field="score"), headers=bearer(admin))
        assert r.status_code == 422 and "'score' is not in file" in r.text, r.text
        r = c2.post("/v1/jobs", json=spec(uri), headers=bearer(admin))
        assert r.status_code == 201, r.text
        appdb = c2.app.state.shunter.db  # type: ignore[attr-defined]
        n, t = claim(appdb, r.json()["id"])
        payload = c2.get(internal(r.json()["id"], n, "spec"), headers=bearer(t)).json()
        entry = payload["inputs"][uri]
        assert entry["kind"] == "uri" and entry["format"] == "parquet"
        assert [f["uri"] for f in entry["files"]] == [
            f"s3://{data_bucket}/films/a.parquet",
            f"s3://{data_bucket}/films/b.parquet",
        ]
