"""Object storage end to end (issue 14 item 4's bar) on a real local Ray and a real local S3
server (moto): with ``SHUNTER_STORAGE=s3://bucket/prefix`` a job's checkpoints are listed by
the API under the bucket and are there as objects; a paused job resumes from its checkpoint
in the bucket (read through the node cache) at exactly the next step; the final model downloads
from the bucket; DELETE removes the job's objects."""

from __future__ import annotations

import dataclasses
import io
import re
import secrets
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import ApiServer, slow_llama_spec, wait_for
from s3_server import S3Server, aws_env, running_s3

pytestmark = pytest.mark.slow

STEPS = 10


@pytest.fixture
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture
def s3_api(
    tmp_path: Path, data_root: Path, ray_launcher: Any, s3: S3Server
) -> Iterator[tuple[ApiServer, str]]:
    from launcher.ray_launcher import RayLauncher

    bucket = s3.bucket("e2e-" + secrets.token_hex(4))
    # The session's head with this server's endpoint and credentials in the jobs' env.
    config = dataclasses.replace(
        ray_launcher.config, extra_env={**ray_launcher.config.extra_env, **s3.env}
    )
    server = ApiServer(
        tmp_path / "home",
        data_root,
        RayLauncher(config),
        lease_seconds=60.0,
        max_infra_retries=2,
        storage=f"s3://{bucket}/shunter",
    ).start()
    try:
        yield server, bucket
    finally:
        server.stop_jobs()
        server.stop()


def test_checkpoints_in_the_bucket_and_resume_from_there(
    s3_api: tuple[ApiServer, str], s3: S3Server
) -> None:
    api, bucket = s3_api
    spec = slow_llama_spec("e2e-s3", steps=STEPS, training={"save_steps": 2})
    job_id = api.submit(spec)
    prefix = f"s3://{bucket}/shunter/{job_id}"
    wait_for(
        lambda: any(c["attempt"] == 1 for c in api.checkpoints(job_id)),
        timeout=300,
        what="a checkpoint of attempt 1 to be registered",
    )
    r = api.api().post(f"/v1/jobs/{job_id}/pause")
    assert r.status_code == 200, r.text
    paused = api.wait_status(job_id, {"paused", "failed", "succeeded"}, timeout=300)
    assert paused["status"] == "paused", (paused["error"], api.events(job_id))

    first = api.checkpoints(job_id)
    assert first and all(c["uri"].startswith(f"{prefix}/checkpoint-") for c in first), first
    assert all(c["verified"] and c["bytes"] > 0 for c in first), first
    keys = s3.keys(bucket, f"shunter/{job_id}/")
    for c in first:  # every listed checkpoint is in the bucket, manifest and all
        key = c["uri"].removeprefix(f"s3://{bucket}/") + "/manifest.json"
        assert key in keys, (key, keys)
    stopped = max(c["step"] for c in first)

    assert api.api().post(f"/v1/jobs/{job_id}/resume").status_code == 200
    job = api.wait_done(job_id, timeout=400)
    assert job["status"] == "succeeded", (job["error"], api.events(job_id))
    assert job["attempt"] == 2
    logs = api.launcher.logs(f"{job_id}-2")
    resumed = re.findall(r"resumed from \S*checkpoint-(\d+) at step (\d+)", logs)
    assert resumed and int(resumed[0][1]) == stopped, (resumed, stopped)
    second = sorted(p["step"] for p in api.metrics(job_id, "loss") if p["attempt"] == 2)
    assert second == list(range(stopped + 1, STEPS + 1))

    assert job["final_model_uri"] == f"{prefix}/final"
    r = api.api().get(f"/v1/jobs/{job_id}/checkpoints/final/download")
    assert r.status_code == 200, r.text
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = {m.name for m in tar.getmembers()}
    assert f"{job_id}-final/config.json" in names, names

    assert api.api().delete(f"/v1/jobs/{job_id}").status_code == 204
    assert s3.keys(bucket, f"shunter/{job_id}/") == []
