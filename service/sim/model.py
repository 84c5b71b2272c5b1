"""The simulator's data: a trace's jobs and teams (``SimJob``, ``SimTeam``), its settings
(``SimConfig``), each job's state on the virtual clock (``JobState``) and the clock itself
(``EPOCH``, ``at``, ``secs``). ``service.sim.engine`` moves them; ``service.sim.outcome``
reports them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from service.policy.accelerators import AcceleratorType, catalog_of, eligible
from service.policy.capacity import NodeFree
from service.policy.eta_model import LONG_WAIT_S
from service.policy.snapshot import ActiveJob, QueueEntry, queue_entry
from shunter.jobspec.vocab import priority_rank

__all__ = [
    "EPOCH",
    "JobState",
    "QueuedView",
    "Shape",
    "SimConfig",
    "SimJob",
    "SimTeam",
    "at",
    "cluster_of",
    "resolve_types",
    "secs",
]

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, kw_only=True)
class SimJob:
    """One trace line."""

    id: str
    team: str
    submit_s: float
    num_workers: int
    gpus_per_worker: float
    cpus_per_worker: float
    duration_s: float  # work at full speed: decides when it finishes, never read by policy
    max_runtime_s: float | None = None
    priority: str = "normal"
    preemptible: bool = True
    # Accelerator types it asks for, in order of preference (() = any), and its plan's
    # memory per GPU (GB; None = unknown): it runs only on types whose card holds it
    # (``policy.accelerators.eligible``, as submit decides live).
    accelerators: tuple[str, ...] = ()
    gpu_memory_gb: float | None = None
    # Elastic (``resources.num_workers: {min, max}``): ``num_workers`` is max, this is min.
    # At w workers the job does w / num_workers of its work per second (the global batch
    # is the same at every width: ``duration_s`` is its run time at max).
    min_workers: int | None = None


@dataclass(frozen=True, kw_only=True)
class SimTeam:
    weight: float = 1.0
    quota_gpus: float | None = None
    quota_cpus: float | None = None
    max_priority: str = "high"
    quota_gpus_by_type: Mapping[str, float] | None = None  # GPUs per accelerator type

    def capped(self, priority: str) -> str:
        """A priority above the team's max_priority is refused live (403); here, capped."""
        return (
            self.max_priority
            if priority_rank(priority) < priority_rank(self.max_priority)
            else priority
        )


@dataclass(frozen=True, kw_only=True)
class SimConfig:
    policy: str = "fair"
    tick_s: float = 60.0  # the scheduler's interval on the virtual clock
    checkpoint_interval_s: float = 600.0  # work between periodic checkpoints
    report_delay_s: float = 60.0  # run time before a job's step rate is known
    grace_s: float = 600.0
    min_runtime_s: float = 300.0
    # Half-life of the owed account and of the usage history (the live default): what a team
    # is owed is not forgotten within a trace of hours.
    half_life_s: float = 7 * 24 * 3600.0
    eta: bool = True
    # ETAs as the live loop gives them: only the first ``eta_depth`` queued jobs in policy
    # order get one (SHUNTER_SCHEDULER_MAX_PLAN_DEPTH's default); a job submitted deeper
    # takes its first estimate at a later ETA tick that finds it within the depth. ETA
    # ticks: a tick with a submit, and every ``eta_refresh_s`` while some queued job has
    # none. None: every job's first estimate is taken at its submit (the forward run over
    # the whole queue at every submit tick).
    eta_depth: int | None = 500
    eta_refresh_s: float = 600.0
    # The forward run as it was before issue 30 (every job to its max_runtime, no backfill,
    # no calibration, no p90): the baseline ``bench/eta_calibration.py`` measures against.
    eta_legacy: bool = False
    # Plan only at ticks where some decision could change (``_Sim._quiet``); the decisions
    # are the same as planning at every tick (tested), only faster.
    skip_quiet_ticks: bool = True
    # Per accelerator type the weight its GPUs count with in fair shares (the admin's
    # ``SHUNTER_ACCELERATOR_TYPES`` weights; a type left out counts 1). None: the cluster
    # file's (a node's ``weight``).
    type_weights: Mapping[str, float] | None = None


class Shape(NamedTuple):
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float


@dataclass(kw_only=True)
class JobState:
    job: SimJob  # the trace line at the width it is queued (elastic: min) or runs at now
    line: SimJob  # the trace line as written
    priority: str
    done: float = 0.0  # work done and kept (up to now or the last stop)
    attempt_start: float | None = None
    attempt_done0: float = 0.0  # work done when this attempt started
    queued_since: float = 0.0
    run_s: float = 0.0  # run time of finished attempts
    runs: list[list[float]] = field(default_factory=list)
    preemptions: int = 0
    estimate: float | None = None
    estimate_p90: float | None = None
    estimated_at: float | None = None  # when the first estimate was made
    predicted: float | None = None  # the forward run's start then, before calibration
    scale: float = 1.0  # the calibration's scale then (``Eta.scale``)
    finished: bool = False
    fits_ever: bool = True
    entry: QueueEntry | None = None  # the policy's view, kept until it changes (a stop)
    active: ActiveJob | None = None  # kept until its step rate is known
    rate_known: bool = False
    placement: list[str] = field(default_factory=list)
    run_types: list[tuple[str, float]] = field(default_factory=list)  # per run: type, GPUs
    resizes: list[tuple[float, int, str]] = field(default_factory=list)  # (at, to, kind)

    def policy_entry(self) -> QueueEntry:
        """The policy's view of it queued, kept until it changes (a stop clears it)."""
        if self.entry is None:
            self.entry = queue_entry(
                job_id=self.job.id,
                team=self.job.team,
                priority=self.priority,
                gang=self.job,
                created_at=at(self.job.submit_s),
                queued_since=at(self.queued_since),
                max_runtime_s=self.job.max_runtime_s,
                run_s=self.run_s,
                preemptible=self.job.preemptible,
                accelerators=self.job.accelerators,
                workers=None
                if self.line.min_workers is None
                else (self.line.min_workers, self.line.num_workers),
            )
        return self.entry

    def done_at(self, t: float) -> float:
        """Work done by virtual time ``t`` (kept work, plus this attempt's since its start)."""
        if self.attempt_start is None:
            return self.done
        return min(self.done + (t - self.attempt_start) * self.rate, self.job.duration_s)

    @property
    def rate(self) -> float:
        """Work per second: 1.0, or an elastic job's width / its max."""
        return 1.0 if self.job is self.line else self.job.num_workers / self.line.num_workers


def at(s: float) -> datetime:
    return EPOCH + timedelta(seconds=s)


def secs(t: datetime) -> float:
    return (t - EPOCH).total_seconds()


def resolve_types(
    jobs: Sequence[SimJob], catalog: Mapping[str, AcceleratorType]
) -> tuple[list[SimJob], dict[str, str]]:
    """Each job with the types its plan fits (``policy.accelerators.eligible``), and the
    jobs no type holds with why (live: a 422 at submit; here they never queue)."""
    out, rejected = [], {}
    for j in jobs:
        need = None if j.gpu_memory_gb is None else int(j.gpu_memory_gb * 1024**3)
        types, why = eligible(j.accelerators, need if j.gpus_per_worker > 0 else None, catalog)
        if why is not None:
            rejected[j.id] = why
        else:
            out.append(j if types == j.accelerators else replace(j, accelerators=types))
    return out, rejected


class QueuedView(Sequence[QueueEntry]):
    """The queued jobs' entries as the snapshot's ``queued``, built only if read (the
    policy reads the simulator's ``QueueIndex``); valid until the simulator moves on."""

    def __init__(self, states: Mapping[str, JobState], ids: tuple[str, ...]) -> None:
        self.states, self.ids = states, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> QueueEntry:  # type: ignore[override]
        return self.states[self.ids[i]].policy_entry()

    def __iter__(self) -> Iterator[QueueEntry]:
        return (self.states[i].policy_entry() for i in self.ids)


def cluster_of(
    nodes: Sequence[Mapping[str, Any]],
) -> tuple[list[NodeFree], dict[str, AcceleratorType]]:
    """A trace's nodes (``{cpus, gpus, accelerator, gpu_memory_gb, weight}``) as the policy's
    empty nodes, and the accelerator types they make up (a node's ``weight``: its type's)."""
    totals = [
        NodeFree(
            node_id=f"n{i}",
            cpus=float(n.get("cpus", 0)),
            gpus=float(n.get("gpus", 0)),
            accelerator=str(n.get("accelerator", "")),
        )
        for i, n in enumerate(nodes)
    ]
    weights = {str(n["accelerator"]): float(n["weight"]) for n in nodes if "weight" in n}
    catalog = catalog_of(
        (
            (str(n.get("accelerator", "")), float(n.get("gpus", 0)), n.get("gpu_memory_gb"))
            for n in nodes
        ),
        {t: AcceleratorType(name=t, weight=w) for t, w in weights.items()},
    )
    return totals, dict(catalog)


class FirstWait(NamedTuple):
    """A job waiting for its first start since its first estimate: its team and class,
    when the estimate was made and the wait the forward run predicted then (seconds)."""

    key: tuple[str, str]
    made: float
    predicted: float

    @staticmethod
    def keep(into: dict[str, FirstWait], st: JobState, now: float) -> None:
        """Keep ``st``'s first estimate, made ``now``, if it is for its first start and
        the predicted wait is long enough to learn from (``LONG_WAIT_S``)."""
        if not st.runs and st.predicted is not None and st.predicted - now >= LONG_WAIT_S:
            into[st.job.id] = FirstWait((st.job.team, st.priority), now, st.predicted - now)

    @staticmethod
    def bounds(waits: Iterable[FirstWait], now: float) -> dict[tuple[str, str], list[float]]:
        """``EtaModel.waiting``: per team and class, wait so far ÷ predicted wait."""
        out: dict[tuple[str, str], list[float]] = {}
        for w in waits:
            out.setdefault(w.key, []).append((now - w.made) / w.predicted)
        return out
