"""The launcher's own short Ray jobs (the doctor's probe, the hang watch's stack dump) run
through one helper: submitted with the train environment, waited for, their JSON line read
back; one that never ends is stopped and raises. No Ray: the job client is a fake."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launcher.ray_launcher import RayLauncher, RayLauncherConfig
from service.launch import LaunchState, LaunchStatus, RankStack, StackTarget
from shunter.wire import PROBE_PREFIX, STACK_TARGETS_ENV, STACKS_PREFIX


class _Client:
    def __init__(self) -> None:
        self.submitted: list[dict[str, Any]] = []

    def submit_job(self, **kw: Any) -> None:
        self.submitted.append(kw)


def _launcher(monkeypatch: pytest.MonkeyPatch, *, logs: str, ends: bool = True) -> RayLauncher:
    launcher = object.__new__(RayLauncher)  # no dashboard to connect to
    launcher.config = RayLauncherConfig(dashboard_url="http://127.0.0.1:1", driver_python="py")
    client = _Client()
    launcher._client = client  # type: ignore[assignment]
    state = LaunchState.SUCCEEDED if ends else LaunchState.RUNNING
    monkeypatch.setattr(launcher, "status", lambda sid: LaunchStatus(state=state))
    monkeypatch.setattr(launcher, "logs", lambda sid, tail=None: logs)
    stopped: list[str] = []
    monkeypatch.setattr(launcher, "stop", stopped.append)
    launcher.stopped = stopped  # type: ignore[attr-defined]
    return launcher


def test_probe_reads_its_report(monkeypatch: pytest.MonkeyPatch) -> None:
    launcher = _launcher(monkeypatch, logs=f"noise\n{PROBE_PREFIX}{json.dumps({'ok': 1})}\n")
    assert launcher.probe(storage="/tmp/s x", gpu=True) == {"ok": 1}
    (job,) = launcher._client.submitted  # type: ignore[attr-defined]
    assert job["entrypoint"] == "py -m worker.probe --storage '/tmp/s x'"
    assert job["submission_id"].startswith("shunter-doctor-")
    assert job["entrypoint_num_cpus"] == 0 and job["entrypoint_num_gpus"] == 1
    assert job["runtime_env"]["env_vars"]["PYTHONPATH"]


def test_stack_dump_names_its_targets(monkeypatch: pytest.MonkeyPatch) -> None:
    row = {"rank": 1, "state": "S", "cpu_s": 0.5, "text": "trace"}
    launcher = _launcher(monkeypatch, logs=f"{STACKS_PREFIX}{json.dumps([row])}")
    got = launcher.dump_stacks([StackTarget(rank=1, pid=7, node_id="n")], timeout_s=5)
    assert got == [RankStack(rank=1, state="S", cpu_s=0.5, text="trace")]
    (job,) = launcher._client.submitted  # type: ignore[attr-defined]
    assert job["entrypoint"] == "py -m worker.stack_dump"
    assert job["submission_id"].startswith("shunter-stacks-")
    assert "entrypoint_num_gpus" not in job
    targets = json.loads(job["runtime_env"]["env_vars"][STACK_TARGETS_ENV])
    assert targets == [{"rank": 1, "pid": 7, "node_id": "n"}]


def test_a_helper_job_without_output_or_end_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RuntimeError, match="ended succeeded without a report"):
        _launcher(monkeypatch, logs="nothing").probe(storage="/s", gpu=False)
    launcher = _launcher(monkeypatch, logs="", ends=False)
    with pytest.raises(
        RuntimeError, match=r"stack dump job shunter-stacks-\w+ did not finish in 0s"
    ):
        launcher.dump_stacks([], timeout_s=0)
    assert len(launcher.stopped) == 1  # type: ignore[attr-defined]
