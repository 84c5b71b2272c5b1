"""Pure policies of the Ray side, as tables: what to do with an active job given Ray's view,
free resources after our own packing, never-fits reasons, error classification, preflight."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from service.jobs.reconcile import Decision, decide_active
from service.jobs.states import JobStatus
from service.launch import ClusterResources, LaunchState, NodeResources
from service.policy.planner import QueueEntry
from service.scheduler.loop import effective_free, never_fits_reason
from shunter.jobspec import JobSpec
from worker.classify import classify
from worker.driver import preflight

S, L, D = JobStatus, LaunchState, Decision


@pytest.mark.parametrize(
    ("status", "cancel", "launch", "decision"),
    [
        (S.STARTING, False, L.PENDING, D.KEEP),
        (S.STARTING, False, L.RUNNING, D.KEEP),
        (S.RUNNING, False, L.RUNNING, D.KEEP),
        (S.STARTING, False, L.UNKNOWN, D.LOSE),  # claimed, service died before submit
        (S.RUNNING, False, L.FAILED, D.LOSE),  # driver killed
        (S.RUNNING, False, L.STOPPED, D.LOSE),
        (S.RUNNING, False, L.SUCCEEDED, D.LOSE),  # exited without its final report
        (S.CANCELLING, True, L.RUNNING, D.STOP),
        (S.CANCELLING, True, L.PENDING, D.STOP),
        (S.CANCELLING, True, L.STOPPED, D.FINISH_CANCELLED),
        (S.CANCELLING, True, L.FAILED, D.FINISH_CANCELLED),
        (S.CANCELLING, True, L.UNKNOWN, D.FINISH_CANCELLED),
        (S.STARTING, True, L.PENDING, D.STOP),  # cancel requested while launching
        (S.RUNNING, True, L.SUCCEEDED, D.FINISH_CANCELLED),
    ],
)
def test_decide_active(
    status: JobStatus, cancel: bool, launch: LaunchState, decision: Decision
) -> None:
    assert decide_active(status=status, cancel_requested=cancel, launch=launch) == decision


def node(nid: str, total: float, free: float, alive: bool = True) -> NodeResources:
    return NodeResources(
        node_id=nid, address="x", alive=alive, total_cpus=total, free_cpus=free,
        total_gpus=0, free_gpus=0,
    )  # fmt: skip


def entry(jid: str, workers: int, cpus: float = 1) -> QueueEntry:
    return QueueEntry(
        job_id=jid, team="t", priority="normal", created_at=datetime.now(UTC),
        num_workers=workers, cpus_per_worker=cpus, gpus_per_worker=0,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("nodes", "active", "expected"),
    [
        ([node("a", 4, 4)], [], {"a": 4}),
        ([node("a", 4, 4)], [entry("j", 2)], {"a": 2}),  # claimed, not yet reserved in Ray
        ([node("a", 4, 2)], [entry("j", 2)], {"a": 2}),  # reserved in Ray too: not twice
        ([node("a", 4, 1)], [], {"a": 1}),  # something else holds CPUs: Ray's view wins
        ([node("a", 2, 2), node("b", 2, 2)], [entry("j", 3)], {"a": 0, "b": 1}),
        ([node("a", 2, 2), node("b", 2, 0, alive=False)], [], {"a": 2}),
    ],
)
def test_effective_free(
    nodes: list[NodeResources], active: list[QueueEntry], expected: dict[str, float]
) -> None:
    free = effective_free(ClusterResources(nodes=nodes), active)
    assert {n.node_id: n.cpus for n in free} == expected


@pytest.mark.parametrize(
    ("nodes", "job", "fits"),
    [
        ([node("a", 2, 0)], entry("j", 2), True),  # busy now, but fits an empty cluster
        ([node("a", 2, 2)], entry("j", 3), False),
        ([node("a", 1, 1), node("b", 1, 1)], entry("j", 2), True),  # across nodes
        ([node("a", 3, 3), node("b", 3, 3)], entry("j", 2, cpus=4), False),  # per-node packing
        ([node("a", 8, 8, alive=False)], entry("j", 1), False),
    ],
)
def test_never_fits(nodes: list[NodeResources], job: QueueEntry, fits: bool) -> None:
    reason = never_fits_reason(job, ClusterResources(nodes=nodes))
    assert (reason is None) == fits
    if reason:
        assert "cannot fit the cluster" in reason


class RayTaskErrorLike(FileNotFoundError):
    """Ray's dynamic RayTaskError(FileNotFoundError): the original type, with ``cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class WorkerGroupError(Exception):
    def __init__(self, failures: dict[int, BaseException]) -> None:
        super().__init__("Training failed due to worker errors")
        self.worker_failures = failures


class OutOfMemoryError(RuntimeError):
    pass


class ActorDiedError(Exception):
    pass


class ConfigError(ValueError):
    pass


missing = FileNotFoundError(2, "No such file or directory", "/data/nope.tsv")


@pytest.mark.parametrize(
    ("exc", "type_", "needle"),
    [
        (missing, "user_error", "/data/nope.tsv"),
        (RayTaskErrorLike(missing), "user_error", "/data/nope.tsv"),
        (WorkerGroupError({0: RuntimeError("gloo: connection closed"), 1: missing}), "user_error",
         "/data/nope.tsv"),
        (OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"), "oom", "2.00 GiB"),
        (RuntimeError("[enforce fail at alloc_cpu.cpp] DefaultCPUAllocator: can't allocate"),
         "oom", "DefaultCPUAllocator"),
        (MemoryError(), "oom", "MemoryError"),
        (WorkerGroupError({1: ActorDiedError("node died")}), "infra_lost", "node died"),
        (ConfigError("training.optim: unknown 'adamw_fast'"), "user_error", "adamw_fast"),
        (RuntimeError("boom"), "internal", "RuntimeError: boom"),
    ],
)  # fmt: skip
def test_classify(exc: BaseException, type_: str, needle: str) -> None:
    info = classify(exc)
    assert info.type == type_
    assert needle in info.message


def test_preflight(tmp_path: Path) -> None:
    ok = tmp_path / "train.txt"
    ok.write_text("x")

    def spec(**data: object) -> JobSpec:
        model = {"name_or_path": "gpt2", "task": "causal-lm"}
        return JobSpec.model_validate({"name": "p", "model": model, "data": data})

    assert preflight(spec(train={"path": str(ok)})) is None
    assert preflight(spec(train={"hub": "glue"})) is None
    bad = preflight(spec(train={"path": str(ok)}, eval={"path": "/nope/dev.tsv"}))
    assert bad is not None and bad.type == "user_error" and "/nope/dev.tsv" in bad.message
