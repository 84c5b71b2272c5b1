"""Object store faults end to end (issue 32, item 2's bars) on the session's Ray and a real
local S3 server (moto) behind ``tests.s3_faults.S3Faults``: the service and the Ray job both
reach the store only through the proxy (``AWS_ENDPOINT_URL`` travels to the jobs: STORAGE_ENV).

- Flaky store: 20% of S3 requests are answered ``503 SlowDown`` or reset while a 2-worker job
  checkpoints and a user downloads a checkpoint and then the final model. The job succeeds,
  every registered checkpoint verifies (and its manifest is in the bucket), and the downloads
  load with ``from_pretrained``.
- Dead store: with a 5 s bound (``SHUNTER_STORAGE_RETRY_S``), the proxy answers everything 503
  once a checkpoint has verified. The attempt ends ``storage_unavailable`` (lost, requeued:
  not ``internal``), the store comes back, and attempt 2 resumes at the step after the last
  verified checkpoint and succeeds, every step's loss there once.
"""

from __future__ import annotations

import dataclasses
import io
import re
import secrets
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import ApiServer, slow_llama_spec, tiny_llama_spec, wait_for
from s3_faults import S3Faults
from s3_server import S3Server, aws_env, running_s3

pytestmark = pytest.mark.slow


@dataclasses.dataclass
class Store:
    s3: S3Server
    proxy: S3Faults
    bucket: str


def _store(env_over: dict[str, str], *, rate: float, seed: int) -> Any:
    import contextlib

    @contextlib.contextmanager
    def cm() -> Iterator[tuple[Store, dict[str, str]]]:
        with running_s3() as s3, S3Faults(s3.endpoint, rate=0.0, seed=seed,
                                          kinds=("503", "reset")) as proxy:  # fmt: skip
            bucket = s3.bucket("faults-" + secrets.token_hex(4))  # straight to moto
            proxy.rate = rate
            env = {**s3.env, "AWS_ENDPOINT_URL": proxy.endpoint, **env_over}
            with aws_env(env):  # the service (this process) and, via STORAGE_ENV, the jobs
                yield Store(s3, proxy, bucket), env

    return cm()


def _api(tmp_path: Path, data_root: Path, ray_launcher: Any, store: Store,
         env: dict[str, str], **settings: Any) -> ApiServer:  # fmt: skip
    from launcher.ray_launcher import RayLauncher

    config = dataclasses.replace(
        ray_launcher.config, extra_env={**ray_launcher.config.extra_env, **env}
    )
    return ApiServer(
        tmp_path / "home",
        data_root,
        RayLauncher(config),
        lease_seconds=60.0,
        storage=f"s3://{store.bucket}/shunter",
        **settings,
    ).start()


def _load(content: bytes, into: Path, name: str) -> Any:
    from transformers import AutoModelForCausalLM

    with tarfile.open(fileobj=io.BytesIO(content)) as tar:
        tar.extractall(into, filter="data")
    return AutoModelForCausalLM.from_pretrained(into / name)


def _download(api: ApiServer, job_id: str, which: str) -> httpx.Response:
    with httpx.Client(base_url=api.url, headers=api.api().headers, timeout=300) as http:
        r = http.get(f"/v1/jobs/{job_id}/checkpoints/{which}/download")
    assert r.status_code == 200, r.text
    assert len(r.content) == int(r.headers["content-length"])
    return r


def _failure(api: ApiServer, job_id: str, job: dict[str, Any]) -> str:
    logs = api.launcher.logs(f"{job_id}-{job['attempt']}")
    return f"{job['error']} {api.events(job_id)}\n{logs[-6000:]}"


def test_flaky_store_job_succeeds_and_downloads_load(
    tmp_path: Path, data_root: Path, ray_launcher: Any
) -> None:
    steps = 8
    with _store({}, rate=0.2, seed=32) as (store, env):
        api = _api(tmp_path, data_root, ray_launcher, store, env, max_infra_retries=0)
        try:
            spec = tiny_llama_spec("e2e-flaky-s3", steps=steps, training={"save_steps": 2})
            job_id = api.submit(spec)
            # A user downloads the first verified checkpoint while the job goes on.
            first = wait_for(
                lambda: next((c for c in api.checkpoints(job_id) if c["verified"]), None),
                timeout=300,
                what="a verified checkpoint",
            )
            t0 = time.monotonic()
            r = _download(api, job_id, str(first["step"]))
            print(f"checkpoint download under faults: {time.monotonic() - t0:.1f} s")
            model = _load(r.content, tmp_path / "ck", f"{job_id}-{first['step']}")
            assert model.config.num_hidden_layers == 2

            job = api.wait_done(job_id, timeout=400)
            assert job["status"] == "succeeded", _failure(api, job_id, job)
            assert job["attempt"] == 1  # retried below the attempt: nothing was lost
            losses = sorted(p["step"] for p in api.metrics(job_id, "loss"))
            assert losses == list(range(1, steps + 1))
            cks = api.checkpoints(job_id)
            assert {c["step"] for c in cks} >= {2, 4, 6}, cks
            bad = [(c["step"], c["verified"], c["bytes"]) for c in cks
                   if not (c["verified"] and c["bytes"] > 0)]  # fmt: skip
            logs = api.launcher.logs(f"{job_id}-1")
            said = [ln for ln in logs.splitlines() if "verif" in ln or "Error" in ln]
            assert not bad, (bad, said[-20:])
            keys = set(store.s3.keys(store.bucket, f"shunter/{job_id}/"))
            for c in cks:
                key = c["uri"].removeprefix(f"s3://{store.bucket}/") + "/manifest.json"
                assert key in keys, (key, sorted(keys))

            t0 = time.monotonic()
            r = _download(api, job_id, "final")
            print(f"final download under faults: {time.monotonic() - t0:.1f} s")
            model = _load(r.content, tmp_path / "final", f"{job_id}-final")
            assert model.config.num_hidden_layers == 2
            counts = dict(store.proxy.counts)
            print(f"faults injected: {counts}")
            assert counts.get("503", 0) > 0 and counts.get("reset", 0) > 0, counts
        finally:
            api.stop_jobs()
            api.stop()


def test_dead_store_is_storage_unavailable_and_resumes(
    tmp_path: Path, data_root: Path, ray_launcher: Any
) -> None:
    steps = 12
    bound = {"SHUNTER_STORAGE_RETRY_S": "5", "SHUNTER_S3_MAX_ATTEMPTS": "2"}
    with _store(bound, rate=0.0, seed=1) as (store, env):
        api = _api(tmp_path, data_root, ray_launcher, store, env, max_infra_retries=3)
        try:
            spec = slow_llama_spec("e2e-dead-s3", steps=steps, training={"save_steps": 3})
            job_id = api.submit(spec)
            verified = wait_for(
                lambda: [c for c in api.checkpoints(job_id) if c["verified"]],
                timeout=300,
                what="a verified checkpoint of attempt 1",
            )
            store.proxy.down = True
            down_at = time.monotonic()
            lost = wait_for(
                lambda: next(
                    (
                        e
                        for e in api.events(job_id)
                        if e["type"] == "attempt_lost" and e["attempt"] == 1
                    ),
                    None,
                ),
                timeout=300,
                what="attempt 1 to end on the outage",
            )
            detected = time.monotonic() - down_at
            store.proxy.down = False
            up_at = time.monotonic()
            assert "storage_unavailable" in lost["message"], lost
            assert "internal" not in lost["message"], lost
            print(f"outage -> attempt lost: {detected:.1f} s; {lost['message']}")

            job = api.wait_done(job_id, timeout=400)
            assert job["status"] == "succeeded", _failure(api, job_id, job)
            print(f"store back -> job succeeded: {time.monotonic() - up_at:.1f} s")
            n = job["attempt"]
            assert n >= 2
            # The newest checkpoint that verified before the outage (a later one may have
            # verified while the outage began to be felt: take the newest of attempt 1).
            at = max(c["step"] for c in api.checkpoints(job_id)
                     if c["attempt"] == 1 and c["verified"])  # fmt: skip
            assert at >= max(c["step"] for c in verified)
            logs = api.launcher.logs(f"{job_id}-{n}")
            resumed = re.findall(r"resumed from \S*checkpoint-(\d+) at step (\d+)", logs)
            assert resumed and int(resumed[0][1]) == at, (resumed, at)
            by_attempt: dict[int, list[int]] = {}
            for p in api.metrics(job_id, "loss"):
                by_attempt.setdefault(p["attempt"], []).append(p["step"])
            for got in by_attempt.values():  # no attempt posted a step twice
                assert len(got) == len(set(got)), by_attempt
            assert sorted(by_attempt[n]) == list(range(at + 1, steps + 1)), by_attempt
            assert set(range(1, at + 1)) <= set(by_attempt[1]), by_attempt
            assert job["error"] is None or not job["error"], job
        finally:
            api.stop_jobs()
            api.stop()
