"""One queued job as the policy sees it (``QueueEntry``, built by ``queue_entry``): its own
module, so the snapshot that holds the queue and the queue's index (``queue_index``) both
name it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from service.policy.capacity import Gang
from shunter.jobspec.vocab import priority_rank  # lower rank = more important

__all__ = ["QueueEntry", "queue_entry"]


@dataclass(frozen=True, kw_only=True)
class QueueEntry:
    """A job as the policy sees it (queued or active)."""

    job_id: str
    team: str
    priority: str
    created_at: datetime
    num_workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    # Accelerator types it accepts, in order of preference; () = any (``policy.capacity``).
    accelerators: tuple[str, ...] = ()
    # When it last entered the queue (submit, resume or preemption); None = created_at.
    queued_since: datetime | None = None
    # The user's bound on run time across attempts (seconds), and run time already spent.
    max_runtime_s: float | None = None
    run_s: float = 0.0
    preemptible: bool = True
    # Elastic (``resources.num_workers: {min, max}``; ``policy.elastic``): the range it may
    # run at; ``num_workers`` is the width it runs at now (queued: ``min_workers``). None:
    # rigid, ``num_workers`` always.
    min_workers: int | None = None
    max_workers: int | None = None

    @property
    def elastic(self) -> bool:
        return self.max_workers is not None

    @property
    def cpus(self) -> float:
        return self.num_workers * self.cpus_per_worker

    @property
    def gpus(self) -> float:
        return self.num_workers * self.gpus_per_worker

    @property
    def waiting_since(self) -> datetime:
        return self.queued_since or self.created_at

    @cached_property
    def order_key(self) -> tuple[int, datetime, str]:
        """(class rank, waiting since, id): the order that does not depend on the teams;
        kept on the entry (an entry is rebuilt when it queues again)."""
        return (priority_rank(self.priority), self.waiting_since, self.job_id)


def queue_entry(
    *,
    job_id: str,
    team: str,
    priority: str,
    gang: Gang,
    created_at: datetime,
    queued_since: datetime | None,
    max_runtime_s: float | None,
    run_s: float,
    preemptible: bool,
    accelerators: tuple[str, ...] = (),
    workers: tuple[int, int] | None = None,
) -> QueueEntry:
    """THE one place a job becomes a ``QueueEntry``: the live snapshot (a ``Job`` row and
    its attempts) and the simulator (a trace line and its runs) both call it. ``workers``:
    an elastic job's (min, max); ``gang.num_workers`` is its width now."""
    return QueueEntry(
        job_id=job_id,
        team=team,
        priority=priority,
        created_at=created_at,
        num_workers=gang.num_workers,
        cpus_per_worker=gang.cpus_per_worker,
        gpus_per_worker=gang.gpus_per_worker,
        accelerators=accelerators,
        queued_since=queued_since,
        max_runtime_s=max_runtime_s,
        run_s=run_s,
        preemptible=preemptible,
        min_workers=None if workers is None else workers[0],
        max_workers=None if workers is None else workers[1],
    )
