"""The API on object storage (a real local S3 server): a job's output dir is its prefix in the
bucket, checkpoints are registered and listed by URI (and only under that prefix), the final
model downloads from the bucket, DELETE removes the prefix, and the doctor's probe writes,
reads and deletes an object there."""

from __future__ import annotations

import io
import secrets
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from s3_server import S3Server, aws_env, running_s3
from sqlalchemy import update
from svc_helpers import bearer, claim, internal, submit, tiny_spec

import storage
from service.db.tables import Job
from worker.probe import probe


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture
def bucket(s3: S3Server) -> str:
    return s3.bucket("t-" + secrets.token_hex(4))


@pytest.fixture
def settings(make_settings: Callable[..., Any], bucket: str) -> Any:
    return make_settings(storage=f"s3://{bucket}/shunter")


def test_checkpoints_download_and_delete_on_s3(
    client: Any, db: Any, admin_token: str, s3: S3Server, bucket: str, tmp_path: Path
) -> None:
    job_id = submit(client, admin_token, tiny_spec("s3"))["id"]
    n, t = claim(db, job_id)
    out = client.get(internal(job_id, n, "spec"), headers=bearer(t)).json()["output_dir"]
    assert out == f"s3://{bucket}/shunter/{job_id}"

    url = internal(job_id, n, "checkpoints")
    body = {"step": 4, "uri": f"{out}/checkpoint-4", "bytes": 9, "verified": True}
    assert client.post(url, json=body, headers=bearer(t)).status_code == 200
    elsewhere = {**body, "step": 6, "uri": f"s3://{bucket}/shunter/other/checkpoint-6"}
    assert client.post(url, json=elsewhere, headers=bearer(t)).status_code == 422
    listed = client.get(f"/v1/jobs/{job_id}/checkpoints", headers=bearer(admin_token)).json()
    assert [(c["step"], c["uri"]) for c in listed["data"]] == [(4, f"{out}/checkpoint-4")]

    final = tmp_path / "final"
    final.mkdir()
    files = {"config.json": b"{}", "model.safetensors": bytes(range(256)) * 4099}
    for name, data in files.items():
        (final / name).write_bytes(data)
    storage.upload_dir(final, f"{out}/final")
    storage.write_bytes(f"{out}/checkpoint-4/manifest.json", b"{}")
    db.write(
        lambda s: s.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(final_model_uri=f"{out}/final", status="succeeded")
        )
    )
    r = client.get(f"/v1/jobs/{job_id}/checkpoints/final/download", headers=bearer(admin_token))
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        got = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    assert got == {f"{job_id}-final/{k}": v for k, v in files.items()}

    storage.write_bytes(f"s3://{bucket}/shunter/{job_id}x/keep.txt", b"neighbour")
    assert client.delete(f"/v1/jobs/{job_id}", headers=bearer(admin_token)).status_code == 204
    # pyarrow may leave an empty "shunter/" directory marker; the job's objects are gone.
    assert [k for k in s3.keys(bucket) if k != "shunter/"] == [f"shunter/{job_id}x/keep.txt"]


def test_a_gone_model_is_a_clear_409(client: Any, db: Any, admin_token: str, bucket: str) -> None:
    job_id = submit(client, admin_token, tiny_spec("gone"))["id"]
    uri = f"s3://{bucket}/shunter/{job_id}/final"
    db.write(lambda s: s.execute(update(Job).where(Job.id == job_id).values(final_model_uri=uri)))
    r = client.get(f"/v1/jobs/{job_id}/checkpoints/final/download", headers=bearer(admin_token))
    assert r.status_code == 409 and "is gone" in r.json()["message"]


def test_doctor_probe_writes_reads_and_deletes_an_object(s3: S3Server, bucket: str) -> None:
    report = probe(f"s3://{bucket}/shunter")["storage"]
    assert report == {"writable": True, "error": None}
    assert not [k for k in s3.keys(bucket) if ".doctor-" in k]  # the probe object is gone
    missing = probe(f"s3://no-such-{bucket}/shunter")["storage"]
    assert missing["writable"] is False and missing["error"]


def test_save_total_limit_prunes_the_bucket_and_the_listing(
    client: Any, db: Any, admin_token: str, s3: S3Server, bucket: str
) -> None:
    spec = tiny_spec(
        "s3-prune",
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model="loss",
        eval_strategy="steps",
        eval_steps=2,
        save_steps=2,
    )
    spec["data"]["eval"] = spec["data"]["train"]
    job_id = submit(client, admin_token, spec)["id"]
    n, t = claim(db, job_id)
    out = client.get(internal(job_id, n, "spec"), headers=bearer(t)).json()["output_dir"]
    url = internal(job_id, n, "checkpoints")
    # Step 2 is the best eval_loss and stays; 4 goes when 8 arrives (the newest two: 6, 8).
    for step, loss in ((2, 0.1), (4, 0.5), (6, 0.4), (8, 0.3)):
        uri = f"{out}/checkpoint-{step}"
        storage.write_bytes(f"{uri}/manifest.json", b"{}")
        storage.write_bytes(f"{uri}/model/__0_0.distcp", b"x" * 10)
        body = {"step": step, "uri": uri, "bytes": 12, "verified": True,
                "metrics": {"eval_loss": loss}}  # fmt: skip
        assert client.post(url, json=body, headers=bearer(t)).status_code == 200
    listed = client.get(f"/v1/jobs/{job_id}/checkpoints", headers=bearer(admin_token)).json()
    assert [c["step"] for c in listed["data"]] == [2, 6, 8]
    # (pyarrow may leave empty directory markers: "shunter/<job>/")
    stored = {k.split("/")[2] for k in s3.keys(bucket, f"shunter/{job_id}/")} - {""}
    assert stored == {"checkpoint-2", "checkpoint-6", "checkpoint-8"}, stored
