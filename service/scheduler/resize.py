"""What the loop does with ``policy.elastic.decide``'s resizes (issue 30, elastic jobs live).

The loop calls ``decide`` on the same snapshot and plan right after ``plan``, as the simulator
does: its preemptions replace the plan's (a shrink takes the place of a whole-job
preemption), and each resize is acted on here:

- **start** (``RESIZE_START``) and every other start of an elastic job: the attempt is
  claimed at the width decided (``min`` unless wider), recorded on the attempt
  (``attempts.num_workers``) and as the job's width while it runs; the driver then runs the
  spec at that width (``shunter.jobspec.elastic.stored_at_width``: accumulation re-derived,
  same global batch). A ``resized`` event says the width, the range and why.
- **grow / shrink / reclaim** of a running job: a checkpoint-now stop (the preemption
  machinery, ``jobs.checkpoint_now``: the attempt saves at its next step boundary and the job
  is queued again, resuming from that checkpoint) and a ``resized`` event with the reason and
  the widths from -> to. The job queues at ``min`` and, at the tick after it stopped, is
  started again at the width ``decide`` gives then: the width decided here when nothing
  changed meanwhile (a grow: no job waits, so it starts wider; a shrink: the job it made room
  for starts beside it on what is left).

An elastic job queued again after a resize is started only once its last attempt's Ray job
has ended (``last_still_up``), and, for up to ``RESTART_WAIT_S``, only at the width the
resize decided (``Targets``, kept by the leader): Ray counts the old attempt's workers as
held until its worker group is torn down and its usage report catches up (seconds), so a
grow would otherwise restart at the old width. After that wait it starts at what ``decide``
gives then (the capacity went elsewhere meanwhile).

Events name another team's job only by its class (``record.describe``).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.engine import Database
from service.db.tables import ACTIVE, Attempt, Event, Job
from service.launch import Launcher, LaunchState
from service.policy.elastic import RESIZE_GROW, RESIZE_RECLAIM, RESIZE_START, Resize
from service.policy.snapshot import QueueEntry
from service.scheduler.record import describe
from shunter.jobspec.vocab import EventType

__all__ = [
    "RESTART_WAIT_S",
    "Targets",
    "last_still_up",
    "record_start",
    "request_resize",
    "resize_message",
    "start_message",
]

# How long a resized job's restart waits for its target width to fit in the launcher's view
# (Ray reports usage a few seconds late) before it starts at what ``decide`` gives then.
RESTART_WAIT_S = 30.0


def resize_message(r: Resize) -> str:
    """The ``resized`` event's text for a running job's resize: kind, widths, reason (the
    job it makes room for as its own team may see it)."""
    w = f"{r.entry.num_workers} -> {r.to} workers"
    if r.kind == RESIZE_GROW:
        return f"grow {w}: capacity is idle and no job waits for it"
    j = "a waiting job" if r.for_job is None else describe(r.for_job, seen_by=r.entry.team)
    if r.kind == RESIZE_RECLAIM:
        return f"reclaim {w}: workers lent above min taken back for {j}"
    return f"shrink {w} instead of preemption ({r.cause}) for {j}"


def start_message(entry: QueueEntry, width: int, resize: Resize | None) -> str:
    """The ``resized`` event's text for an elastic job's start at ``width``."""
    rng = f"(min {entry.min_workers}, max {entry.max_workers})"
    if resize is not None and resize.kind == RESIZE_START:
        return f"start on {width} workers {rng}: capacity is idle and no job waits for it"
    return f"start on {width} workers {rng}"


def request_resize(
    session: Session, r: Resize, fence: Callable[[Session], bool] | None = None
) -> bool:
    """Ask the running job of ``r`` to checkpoint now and stop, to restart at its new width;
    a ``resized`` event on it. False if it is no longer running (or already stopping), or
    ``fence`` says this process no longer leads."""
    if r.kind == RESIZE_START:
        raise ValueError("a start is a claim at its width, not a stop")
    if fence is not None and not fence(session):
        return False
    # The checkpoint-now mechanism (service.jobs.checkpoint_now) is imported here, at the call.
    from service.jobs.checkpoint_now import RESIZE_DETAIL, request_preemption

    text = resize_message(r)
    detail = f"{RESIZE_DETAIL}{text}"  # ``resized`` events, not ``preempted`` ones
    if not request_preemption(session, job_id=r.job_id, cause="preempt", detail=detail):
        return False
    number = session.execute(
        select(Attempt.number).where(Attempt.job_id == r.job_id, Attempt.status == ACTIVE)
    ).scalar_one_or_none()
    session.add(Event(job_id=r.job_id, type=EventType.RESIZED, message=text, attempt=number))
    session.flush()
    return True


def record_start(
    session: Session, entry: QueueEntry, *, width: int, resize: Resize | None, attempt: int
) -> None:
    """The ``resized`` event of an elastic job's attempt starting at ``width`` (in the claim's
    transaction)."""
    text = start_message(entry, width, resize)
    session.add(Event(job_id=entry.job_id, type=EventType.RESIZED, message=text, attempt=attempt))


def last_still_up(db: Database, launcher: Launcher, job_id: str) -> bool:
    """Whether the Ray job of ``job_id``'s last attempt is still pending or running (its
    workers' capacity not yet given back). False when it never ran or Ray cannot say."""
    number = db.read(lambda s: s.execute(select(Job.attempt).where(Job.id == job_id)).scalar())
    if not number:
        return False
    try:
        state = launcher.status(f"{job_id}-{number}").state
    except Exception:  # Ray unreachable: the placement decides as for any job
        return False
    return state in (LaunchState.PENDING, LaunchState.RUNNING)


class Targets:
    """The widths the leader's resizes decided, per job, until the job restarts at that
    width or ``RESTART_WAIT_S`` passes (monotonic clock; lost with the lead: then the restart
    takes what ``decide`` gives)."""

    def __init__(self, wait_s: float = RESTART_WAIT_S) -> None:
        self.wait_s = wait_s
        self._want: dict[str, tuple[int, float]] = {}

    def want(self, job_id: str, width: int) -> None:
        self._want[job_id] = (width, time.monotonic() + self.wait_s)

    def hold(self, db: Database, launcher: Launcher, job_id: str, width: int) -> bool:
        """Whether to hold back an elastic job's start at ``width``: its last attempt's Ray
        job is still up, or ``width`` is narrower than the resize decided and the wait is not
        over. A start that goes ahead forgets the target."""
        if last_still_up(db, launcher, job_id):
            return True
        got = self._want.get(job_id)
        if got is not None and width < got[0] and time.monotonic() < got[1]:
            return True
        self._want.pop(job_id, None)
        return False
