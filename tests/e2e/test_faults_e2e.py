"""Cancel and fault tolerance through the real API on a real local Ray.

(a) a worker killed mid-run: Ray Train restarts the group, trainer_core resumes from the
    newest checkpoint, the job succeeds in the same attempt;
(b) the driver killed: the scheduler loses the attempt, attempt 2 resumes from the newest
    verified checkpoint, and attempt 1's token is fenced (409);
cancel stops the Ray job within 30 s, and resume starts attempt 2 from the newest checkpoint.
(c), a service restart mid-job, is part of ``test_train_e2e``'s success test.
"""

from __future__ import annotations

import os
import re
import signal
import time
from typing import Any

import httpx
import pytest
from harness import ApiServer, slow_llama_spec, wait_for

pytestmark = pytest.mark.slow


def _logs(api: ApiServer, submission_id: str) -> str:
    text: str = api.launcher.logs(submission_id)
    return text


def _pid(api: ApiServer, submission_id: str, pattern: str) -> int:
    found = wait_for(
        lambda: re.search(pattern, _logs(api, submission_id)),
        timeout=300,
        what=f"/{pattern}/ in the logs of {submission_id}",
    )
    return int(found.group(1))


def _checkpointed(api: ApiServer, job_id: str, step: int) -> Any:
    return wait_for(
        lambda: any(c["step"] >= step for c in api.checkpoints(job_id)),
        timeout=300,
        what=f"a checkpoint at step >= {step} of {job_id}",
    )


def test_cancel_while_running_then_resume_from_the_checkpoint(api: ApiServer) -> None:
    steps = 20
    job_id = api.submit(slow_llama_spec("e2e-cancel", steps=steps))
    _checkpointed(api, job_id, 4)
    t0 = time.monotonic()
    r = api.api().post(f"/v1/jobs/{job_id}/cancel")
    assert r.status_code in (200, 202), r.text
    job = api.wait_status(job_id, {"cancelled"}, timeout=30)
    assert time.monotonic() - t0 <= 30
    assert job["error"]["type"] == "cancelled"
    state = api.launcher.status(f"{job_id}-1").state.value
    assert state in {"stopped", "failed"}, state
    # Many at once (the reconcile sweep's call): one listing of Ray's jobs, the same answer.
    many = [f"{job_id}-1", *(f"{job_id}-never-{i}" for i in range(5))]
    got = api.launcher.statuses(many)
    assert got[many[0]].state.value == state
    assert {got[sid].state.value for sid in many[1:]} == {"unknown"}, got
    time.sleep(3)  # a cancel never comes back to life
    assert api.job(job_id)["status"] == "cancelled"
    wait_for(
        lambda: (c := api.launcher.cluster()).free_cpus >= c.total_cpus,
        timeout=60,
        what="the job's CPUs to be free again",
    )
    newest = max(c["step"] for c in api.checkpoints(job_id) if c["verified"])
    r = api.api().post(f"/v1/jobs/{job_id}/resume")
    assert r.status_code in (200, 202), r.text
    job = api.wait_done(job_id)
    assert job["status"] == "succeeded", (job["error"], api.events(job_id))
    assert job["attempt"] == 2
    _assert_resumed_exactly(api, job_id, attempt=2, from_step=newest, last=steps)


def _assert_resumed_exactly(api: ApiServer, job_id: str, *, attempt: int, from_step: int,
                            last: int) -> None:  # fmt: skip
    """Attempt ``attempt`` resumed at a checkpoint >= ``from_step`` and then trained exactly the
    steps after it: nothing before the resume point again, nothing skipped, nothing lost."""
    logs = _logs(api, f"{job_id}-{attempt}")
    resumed = re.findall(r"resumed from \S*checkpoint-(\d+) at step (\d+)", logs)
    # The newest registered checkpoint, or a newer one the attempt published just before it
    # was killed (trainer_core takes the newest that verifies).
    assert resumed and int(resumed[0][1]) >= from_step, (resumed, from_step)
    at = int(resumed[0][1])
    points = api.metrics(job_id, "loss")
    steps = [p["step"] for p in points if p["attempt"] == attempt]
    assert steps == list(range(at + 1, last + 1))
    # The earlier attempt's metrics reached the API for every step up to the checkpoint it
    # resumed from (the sender is flushed before a checkpoint is reported).
    earlier = {p["step"] for p in points if p["attempt"] < attempt}
    assert set(range(1, at + 1)) <= earlier, sorted(set(range(1, at + 1)) - earlier)


def test_killed_worker_is_restarted_by_ray_train_and_resumes(api: ApiServer) -> None:
    # save_total_limit: trainer_core prunes while Ray Train restarts the group (Ray must not
    # prune the same directories: it fails the run when one is already gone).
    steps = 30
    job_id = api.submit(
        slow_llama_spec("e2e-killworker", steps=steps, training={"save_total_limit": 3})
    )
    sub = f"{job_id}-1"
    worker_pid = _pid(api, sub, r"RayTrainWorker pid=(\d+)\)\S* shunter: rank 1 entered")
    _checkpointed(api, job_id, 4)
    try:
        os.kill(worker_pid, signal.SIGKILL)
    except ProcessLookupError:
        pytest.fail("rank 1 had exited before the kill: the run ended early, nothing was tested")
    job = api.wait_done(job_id)
    assert job["status"] == "succeeded", job["error"]
    assert job["attempt"] == 1  # Ray Train restarted the group inside the attempt
    logs = _logs(api, sub)
    resumed = re.findall(r"resumed from \S*checkpoint-(\d+) at step (\d+)", logs)
    assert resumed, "the restarted group did not resume from a checkpoint"
    resume_step = int(resumed[-1][1])
    assert resume_step >= 4
    losses = api.metrics(job_id, "loss")
    assert [p["step"] for p in losses] == list(range(1, steps + 1))  # each step once, none lost


def test_killed_driver_resumes_as_a_new_attempt_and_fences_the_old(api: ApiServer) -> None:
    steps = 20
    job_id = api.submit(slow_llama_spec("e2e-killdriver", steps=steps))
    sub1 = f"{job_id}-1"
    driver_pid = _pid(api, sub1, r"driver pid (\d+) for job")
    _checkpointed(api, job_id, 4)
    newest = max(c["step"] for c in api.checkpoints(job_id) if c["verified"])
    old_token = api.launcher._client.get_job_info(sub1).runtime_env["env_vars"][
        "SHUNTER_ATTEMPT_TOKEN"
    ]
    os.kill(driver_pid, signal.SIGKILL)
    job = api.wait_done(job_id)
    assert job["status"] == "succeeded", (job["error"], api.events(job_id))
    assert job["attempt"] == 2
    assert any(e["type"] == "attempt_lost" for e in api.events(job_id))
    resume_from = max(c["step"] for c in api.checkpoints(job_id) if c["attempt"] == 1)
    assert resume_from >= newest
    _assert_resumed_exactly(api, job_id, attempt=2, from_step=resume_from, last=steps)
    # A late write of the lost attempt is refused and writes nothing.
    late = httpx.post(
        f"{api.url}/v1/internal/jobs/{job_id}/attempts/1/metrics",
        headers={"Authorization": f"Bearer {old_token}"},
        json={"points": [{"step": 999, "name": "loss", "value": 1.0}], "progress": None},
    )
    assert late.status_code == 409, late.text
    assert all(p["step"] != 999 for p in api.metrics(job_id, "loss"))
