"""Tiny-model jobs through the real API and a real local Ray: success (across a service
restart), logs, a user error, each parallel strategy."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import ApiServer, slow_llama_spec, tiny_llama_spec, wait_for

pytestmark = pytest.mark.slow


def test_job_succeeds_with_metrics_checkpoints_and_a_loadable_model(api: ApiServer) -> None:
    """Also (c): the service is restarted mid-job; reconcile keeps the running attempt."""
    # The slower model (~0.8 s a step) so that the restart lands mid-run, not after the end.
    job_id = api.submit(slow_llama_spec("e2e-ok", steps=12))
    wait_for(lambda: api.metrics(job_id, "loss"), timeout=300, what="the first step")
    before = api.job(job_id)
    assert before["status"] == "running" and before["progress"]["step"] < 12, before
    api.restart()  # same database and port: the drivers keep talking to the new process
    job = api.wait_done(job_id)
    assert job["status"] == "succeeded", (job["error"], api.events(job_id))
    assert job["attempt"] == 1  # nothing was lost across the restart
    assert job["progress"]["step"] == 12
    assert job["latest_metrics"] and "loss" in job["latest_metrics"]
    losses = api.metrics(job_id, "loss")
    assert [p["step"] for p in losses] == list(range(1, 13))
    ckpts = api.checkpoints(job_id)
    assert sorted(c["step"] for c in ckpts) == [4, 8, 12]
    assert all(c["verified"] and c["bytes"] > 0 and Path(c["uri"]).is_dir() for c in ckpts)
    assert job["latest_checkpoint"]["step"] == 12
    # The record: what the driver reported it runs with (issue 31), beside the submit's part.
    record = api.api().get(f"/v1/jobs/{job_id}/record").json()["record"]
    assert record["run"]["attempt"] == 1 and record["run"]["packages"]["torch"], record
    assert record["seed"] == job["spec"]["training"]["seed"] and record["code_version"]
    final = Path(job["final_model_uri"])
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.config.num_hidden_layers == 4
    statuses = [e["to_status"] for e in api.events(job_id) if e["to_status"]]
    assert statuses == ["queued", "starting", "running", "succeeded"], statuses
    # Durable logs outlive Ray and the service: a new service on the same home, with no Ray
    # at all, serves the driver's and the workers' output from the job's storage.
    api.stop()
    from service.launch import InMemoryLauncher

    again = ApiServer(api.home, api.data_root, InMemoryLauncher()).start()
    try:
        text, offset, size = "", 0, 1
        while offset < size:
            page = again.api().get(f"/v1/jobs/{job_id}/logs", params={"offset": offset}).json()
            assert page["source"] == "store", page
            text, offset, size = text + page["text"], page["next_offset"], page["size"]
        assert f"for job {job_id} attempt 1" in text  # the driver's own log line
        assert "RayTrainWorker" in text  # the workers' output, forwarded to the driver
        tail = again.api().get(f"/v1/jobs/{job_id}/logs", params={"tail": 2000}).json()
        assert 0 < len(tail["text"].encode()) <= 2000 and text.endswith(tail["text"])
    finally:
        again.stop()


def test_bad_dataset_path_fails_as_user_error(api: ApiServer) -> None:
    victim = api.data_root / "vanishing.txt"
    victim.write_text("some text " * 100)
    job_id = api.submit(
        tiny_llama_spec("e2e-badpath", data={"train": {"path": str(victim), "format": "text"}})
    )
    victim.unlink()  # valid at submit, gone when the driver starts
    job = api.wait_done(job_id, timeout=120)
    assert job["status"] == "failed", job
    assert job["error"]["type"] == "user_error"
    assert str(victim) in job["error"]["message"]


STRATEGIES = {
    "fsdp": {"strategy": "fsdp"},
    "deepspeed": {"strategy": "deepspeed", "deepspeed": {"stage": 2}},
    "tp": {"strategy": "tp", "tensor_parallel_size": 2},
}


def test_each_parallel_strategy_runs_a_short_job(api: ApiServer) -> None:
    # Submitted together: the scheduler runs two at a time on the 4-CPU head (gang of 2 each).
    jobs = {
        name: api.submit(tiny_llama_spec(f"e2e-{name}", steps=4, distributed=dist))
        for name, dist in STRATEGIES.items()
    }
    for name, job_id in jobs.items():
        job = api.wait_done(job_id, timeout=420)
        assert job["status"] == "succeeded", (name, job["error"])
        assert [p["step"] for p in api.metrics(job_id, "loss")] == [1, 2, 3, 4], name
        assert job["final_model_uri"] and Path(job["final_model_uri"]).is_dir(), name
