"""The seam between the service and whatever runs jobs (Ray in production).

The service never imports Ray. The scheduler talks to a ``Launcher``; the real one lives in
``launcher.ray_launcher`` and comes by entry point (group ``shunter.launchers``, name ``ray``,
declared in pyproject.toml) named by ``Settings.launcher``, so the import direction stays
service -> nothing of ours.
``InMemoryLauncher`` is a real small implementation for tests of the service alone.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Protocol

__all__ = [
    "LAUNCHER_GROUP",
    "ClusterResources",
    "ClusterUnavailable",
    "InMemoryLauncher",
    "LaunchRequest",
    "LaunchState",
    "LaunchStatus",
    "Launcher",
    "NodeResources",
    "RankStack",
    "StackTarget",
    "load_launcher",
]


@dataclass(frozen=True, kw_only=True)
class NodeResources:
    node_id: str
    address: str
    alive: bool
    total_cpus: float
    free_cpus: float
    total_gpus: float
    free_gpus: float
    # Its accelerator type (``policy.accelerators``: Ray's ``accelerator_type:<T>`` lower-cased,
    # or the admin's per node group); "" = untyped. ``node_group``: Ray's ``ray.io/node-group``
    # label, what the admin's override is keyed by.
    accelerator: str = ""
    node_group: str = ""


class _AliveSum:
    """A read-only attribute of ``ClusterResources``: the nodes' field of the same name, summed
    over the alive nodes."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name

    def __get__(self, obj: ClusterResources | None, owner: type | None = None) -> float:
        if obj is None:  # on the class: there is no cluster to sum
            raise AttributeError(self.field)
        total: float = sum(getattr(n, self.field) for n in obj.nodes if n.alive)
        return total


@dataclass(frozen=True, kw_only=True)
class ClusterResources:
    nodes: list[NodeResources]

    total_cpus = _AliveSum()
    free_cpus = _AliveSum()
    total_gpus = _AliveSum()
    free_gpus = _AliveSum()


@dataclass(frozen=True, kw_only=True)
class LaunchRequest:
    """Everything the launcher needs to start one attempt of one job.

    The driver gets these as environment variables (never as a shell string) and fetches
    the resolved spec from ``GET /v1/internal/jobs/{job_id}/attempts/{attempt}/spec``.
    """

    submission_id: str  # f"{job_id}-{attempt}"
    job_id: str
    attempt: int
    api_url: str  # where the driver reaches the internal API
    attempt_token: str  # plaintext; the service stores only its hash
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    # The nodes its workers may use (the accelerator type the scheduler chose); () = any.
    only_nodes: tuple[str, ...] = ()


class ClusterUnavailable(RuntimeError):
    """The cluster's control plane (the Ray head: its dashboard, its GCS) does not answer:
    refused, reset, timed out, or a 5xx while it starts. Says nothing about any job: callers
    decide nothing from it and ask again later (the head may come back at the same address)."""


class LaunchState(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    UNKNOWN = "unknown"  # the launcher has no record of this submission id


@dataclass(frozen=True, kw_only=True)
class LaunchStatus:
    state: LaunchState
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class StackTarget:
    """One rank's process, as its worker reported it at start (``POST .../workers``)."""

    rank: int
    pid: int
    node_id: str  # the launcher's node id (Ray: hex); the dump runs there
    node_ip: str = ""


@dataclass(frozen=True, kw_only=True)
class RankStack:
    """What a stack dump found of one rank: its process state (``T`` = stopped), the CPU
    seconds it used over the sampling second, and its threads' stacks (or why not)."""

    rank: int
    state: str
    cpu_s: float | None
    text: str


class Launcher(Protocol):
    def cluster(self) -> ClusterResources: ...
    def submit(self, req: LaunchRequest) -> None: ...
    def status(self, submission_id: str) -> LaunchStatus: ...
    def statuses(self, submission_ids: list[str]) -> dict[str, LaunchStatus]:
        """``status`` of each (UNKNOWN for one the launcher never saw), in as few calls to
        the cluster as it can: the reconcile sweep asks about every active job each tick."""
        ...

    def stop(self, submission_id: str) -> None: ...
    def logs(self, submission_id: str, tail: int | None = None) -> str: ...
    def dump_stacks(self, targets: list[StackTarget], *, timeout_s: float) -> list[RankStack]: ...
    def close(self) -> None: ...


@dataclass(kw_only=True)
class InMemoryLauncher:
    """A launcher that runs nothing: submissions are recorded and their state is set by tests."""

    nodes: list[NodeResources] = field(
        default_factory=lambda: [
            NodeResources(
                node_id="local",
                address="127.0.0.1",
                alive=True,
                total_cpus=8,
                free_cpus=8,
                total_gpus=0,
                free_gpus=0,
            )
        ]
    )
    submitted: dict[str, LaunchRequest] = field(default_factory=dict)
    states: dict[str, LaunchStatus] = field(default_factory=dict)
    log_text: dict[str, str] = field(default_factory=dict)
    stacks: dict[int, RankStack] = field(default_factory=dict)  # by rank, for dump_stacks
    dumped: list[list[StackTarget]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def cluster(self) -> ClusterResources:
        return ClusterResources(nodes=list(self.nodes))

    def submit(self, req: LaunchRequest) -> None:
        with self._lock:
            if req.submission_id in self.submitted:
                raise RuntimeError(f"submission {req.submission_id} already exists")
            self.submitted[req.submission_id] = req
            self.states[req.submission_id] = LaunchStatus(state=LaunchState.PENDING)

    def status(self, submission_id: str) -> LaunchStatus:
        return self.states.get(submission_id, LaunchStatus(state=LaunchState.UNKNOWN))

    def statuses(self, submission_ids: list[str]) -> dict[str, LaunchStatus]:
        return {sid: self.status(sid) for sid in submission_ids}

    def stop(self, submission_id: str) -> None:
        with self._lock:
            if submission_id in self.states:
                self.states[submission_id] = LaunchStatus(state=LaunchState.STOPPED)

    def logs(self, submission_id: str, tail: int | None = None) -> str:
        lines = self.log_text.get(submission_id, "").splitlines()
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "\n".join(lines)

    def dump_stacks(self, targets: list[StackTarget], *, timeout_s: float) -> list[RankStack]:
        """``stacks`` by rank when a test set them, else a stopped process with no stack."""
        self.dumped.append(list(targets))
        return [
            self.stacks.get(t.rank, RankStack(rank=t.rank, state="T", cpu_s=0.0, text=""))
            for t in targets
        ]

    def close(self) -> None:
        return None


LAUNCHER_GROUP = "shunter.launchers"


def load_launcher(name: str, settings: Any) -> Launcher:
    """The launcher ``name`` names, made from ``settings``: an entry point of the
    ``shunter.launchers`` group (``ray``: ``launcher.ray_launcher:from_settings``), ``memory``
    (:class:`InMemoryLauncher`: tests, or serving without Ray), or ``module:factory`` for a
    launcher that is not installed as a package (a test's, a deployment's own)."""
    if name == "memory":
        return InMemoryLauncher()
    found = entry_points(group=LAUNCHER_GROUP).select(name=name)
    if ":" in name:
        point = EntryPoint(name=name, value=name, group=LAUNCHER_GROUP)
    elif found:
        point = next(iter(found))
    else:
        known = sorted(e.name for e in entry_points(group=LAUNCHER_GROUP))
        raise ValueError(
            f"SHUNTER_LAUNCHER={name!r}: no such launcher; installed: {[*known, 'memory']} "
            "(or module:factory)"
        )
    launcher: Launcher = point.load()(settings)
    return launcher
