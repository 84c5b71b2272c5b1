"""ETAs: when a running job ends, and when a queued job starts. Pure.

- ``running_end``: the measured step rate x the steps left, bounded by what is left of
  max_runtime (run time counts across attempts); None when neither is known.
- ``estimate_starts``: the same ``policy.plan`` run forward on a virtual clock. At each step
  the clock jumps to the next expected end of a running (or virtually started) job, that
  job's capacity is released, and ``plan`` decides again. A job started virtually holds its
  capacity until its own bound (rest of max_runtime), else ``default_runtime_s``, else for
  ever (then the jobs that need its capacity get no estimate). No preemption is assumed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta

from service.scheduler.policy.plan import PolicyConfig, bound_end, plan
from service.scheduler.policy.preemption import PreemptRules
from service.scheduler.policy.reservations import Holder, free_at
from service.scheduler.policy.snapshot import ActiveJob, QueueEntry, Snapshot

__all__ = ["estimate_starts", "running_end"]


def running_end(
    *,
    now: datetime,
    started_at: datetime,
    steps_per_s: float | None,
    steps_left: int | None,
    max_runtime_s: float | None,
    run_s_before: float = 0.0,
) -> datetime | None:
    """Expected end of a running attempt; ``run_s_before``: run time of earlier attempts."""
    ends: list[datetime] = []
    if steps_per_s is not None and steps_per_s > 0 and steps_left is not None:
        ends.append(now + timedelta(seconds=max(steps_left, 0) / steps_per_s))
    if max_runtime_s is not None:
        ends.append(started_at + timedelta(seconds=max(max_runtime_s - run_s_before, 0.0)))
    return max(min(ends), now) if ends else None


def _virtual_end(entry: QueueEntry, start: datetime, default_s: float | None) -> datetime | None:
    end = bound_end(entry, start)
    if end is None and default_s is not None:
        end = start + timedelta(seconds=default_s)
    return end


def estimate_starts(
    snap: Snapshot,
    cfg: PolicyConfig | None = None,
    *,
    default_runtime_s: float | None = None,
    max_rounds: int = 1000,
    want: Collection[str] | None = None,
) -> dict[str, datetime]:
    """Job id -> estimated start, for the queued jobs that get one; with ``want``, it may stop
    as soon as those jobs have theirs."""
    cfg = replace(
        cfg or PolicyConfig(),
        preempt=PreemptRules(by_priority=False, by_fair_share=False, by_reservation=False),
    )
    now, free = snap.now, list(snap.free)
    # A job past its expected end is about to end: one second from now, not never.
    soon = now + timedelta(seconds=1)
    active = [
        replace(a, expected_end_at=soon)
        if a.expected_end_at is not None and a.expected_end_at <= now
        else a
        for a in snap.active
    ]
    queued = list(snap.queued)
    out: dict[str, datetime] = {}
    for _ in range(max_rounds):
        p = plan(replace(snap, now=now, free=free, queued=queued, active=active), cfg)
        for d in p.starts:
            out[d.entry.job_id] = now
            end = _virtual_end(d.entry, now, default_runtime_s)
            active.append(ActiveJob(entry=d.entry, started_at=now, expected_end_at=end))
        queued = [d.entry for d in p.decisions if not d.start_now]
        if want is not None and all(w in out for w in want):
            break
        ends = [a.expected_end_at for a in active if a.expected_end_at is not None]
        later = [t for t in ends if t > now]
        if not queued or not later:
            break
        now = min(later)
        active = [a for a in active if a.expected_end_at is None or a.expected_end_at > now]
        free = free_at(snap.totals, [Holder(entry=a.entry, end_at=None) for a in active], now)
    return out
