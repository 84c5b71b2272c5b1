"""ETAs: when a running job ends, and when a queued job starts. Pure.

- ``running_end``: the measured step rate x the steps left, bounded by what is left of
  max_runtime (run time counts across attempts); None when neither is known.
- ``estimate_ranges`` (issue 30): each queued job's estimate, p90 and the forward run's own
  prediction: one forward run with backfill, expected run times and expected arrivals
  (``eta_backfill``, ``eta_arrivals``), calibrated by what was learned (``eta_model``).
- ``estimate_starts``: the plain forward run (``eta_forward``): every job held to its
  bound, no backfill; the simulator's ``eta_legacy`` baseline.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import replace
from datetime import datetime, timedelta

from service.policy.eta_arrivals import Arrivals
from service.policy.eta_backfill import Backfill
from service.policy.eta_forward import Forward
from service.policy.eta_model import (
    LONG_WAIT_S,
    Eta,
    EtaModel,
    RuntimeHistory,
    RuntimeModel,
    WaitHistory,
)
from service.policy.planner import Plan, PolicyConfig, plan
from service.policy.snapshot import Snapshot

__all__ = [
    "LONG_WAIT_S",
    "Eta",
    "EtaModel",
    "RuntimeHistory",
    "RuntimeModel",
    "WaitHistory",
    "estimate_ranges",
    "estimate_starts",
    "running_end",
]


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


def _all_start_now(p: Plan, want: Collection[str] | None) -> bool:
    """Whether every job wanted is among the plan's leading starts. The forward runs place
    those now too (they place the queue in the same order on the same free capacity,
    ``snap.free`` being at most the packing of the running jobs per node as both builders
    make it, and none of them is over quota), so then no forward run is needed."""
    if want is None:
        return False
    now: set[str] = set()
    for d in p.decisions:
        if not d.start_now:
            break
        now.add(d.entry.job_id)
    return all(i in now for i in want)


def estimate_starts(
    snap: Snapshot,
    cfg: PolicyConfig | None = None,
    *,
    plan_now: Plan | None = None,
    default_runtime_s: float | None = None,
    want: Collection[str] | None = None,
) -> dict[str, datetime]:
    """Job id -> estimated start, for the queued jobs that get one: one forward run for the
    whole queue. ``plan_now``: this tick's plan of ``snap`` (computed when not given); with
    ``want``, it stops as soon as those jobs have theirs."""
    p = plan_now if plan_now is not None else plan(snap, cfg)
    if _all_start_now(p, want):
        return dict.fromkeys(want or (), snap.now)
    return Forward(snap, default_runtime_s).run(p.in_order(), want=want)


def estimate_ranges(
    snap: Snapshot,
    cfg: PolicyConfig | None = None,
    *,
    plan_now: Plan | None = None,
    model: EtaModel | None = None,
    want: Collection[str] | None = None,
) -> dict[str, Eta]:
    """Job id -> its ``Eta`` (estimate, p90, the forward run's prediction), for the queued
    jobs that get one.

    One forward run over the plan's order, work-conserving as the policy is: at each
    expected end the earliest job in order that fits starts, and the first job in order
    that does not fit holds a reservation on the nodes that free up soonest for it (EASY:
    what starts there must end before, or leave it what it needs). Jobs end at their
    expected end, not their bound: a running job's step rate when known, else its limit x
    the team's attempts' run time ÷ limit (``RuntimeModel``); a queued job likewise once
    started. The p90: the predicted wait x ``EtaModel.p90_scale``."""
    p = plan_now if plan_now is not None else plan(snap, cfg)
    m = model or EtaModel()
    m = replace(m, runtime=m.runtime.with_running(snap))  # the long attempts not yet ended
    queue = p.in_order()
    if _all_start_now(p, want):
        return dict.fromkeys(want or (), Eta(snap.now, snap.now, snap.now))
    arrivals = (
        None
        if m.arrival_window_s is None
        else Arrivals.of(
            snap,
            queue,
            window_s=m.arrival_window_s,
            fade_s=m.arrival_fade_s,
            want=want,
        )
    )
    run = Backfill(snap, m.runtime)
    mid = run.run(queue, want=want, arrivals=arrivals)
    if want is not None:  # the jobs placed ahead of those wanted are not asked for
        mid = {i: mid[i] for i in want if i in mid}
    teams = {i: (run.placed[i].team, run.placed[i].priority) for i in mid}
    if arrivals is None and m.arrival_window_s is not None:
        # Nothing submitted lately: the queue only drains, and the forward run sees all
        # that decides it. The ratios learned while jobs arrived would only skew it.
        scales = {k: m.scales(*k, calibrated=False) for k in set(teams.values())}
    else:
        scales = {k: m.scales(*k) for k in set(teams.values())}
    out: dict[str, Eta] = {}
    for i, t in mid.items():
        wait = t - snap.now
        s50, s90 = scales[teams[i]]
        if wait.total_seconds() < LONG_WAIT_S:
            s50 = 1.0  # a start minutes away: the ends just ahead decide it
        # The estimate takes as much of the calibration as has earned its place lately
        # (``EtaModel.shrink``); the p90 keeps all of it.
        use = s50**m.shrink
        out[i] = Eta(snap.now + wait * use, snap.now + wait * max(s90, s50), t, s50)
    return out
