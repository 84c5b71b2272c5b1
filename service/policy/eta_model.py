"""What the ETAs learn online (issue 30): how long attempts hold their capacity
(``RuntimeModel``, learned live by ``RuntimeHistory``) and how the forward run's predicted
waits compare with the actual ones (``EtaModel.wait_ratios``, learned live by
``WaitHistory``). Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from functools import cached_property
from typing import NamedTuple

from service.policy.snapshot import ActiveJob, Snapshot

_MIN_SAMPLES = 8  # finished jobs a team needs before its own history is used (else pooled)
_MIN_CALIBRATION = 20  # started jobs before the p90 scale is learned from their waits
LONG_WAIT_S = 600.0  # predicted waits the calibration learns from (shorter ones are noise)


@dataclass(frozen=True, kw_only=True)
class RuntimeModel:
    """How long jobs really run, learned online from finished jobs: per team, run time ÷
    max_runtime of its recently finished jobs (``fractions``), and the run times of those
    finished without a limit (``durations``, seconds). A team with fewer than
    ``_MIN_SAMPLES`` uses every team's pooled; with fewer than that in all a job is expected
    to run to its limit (the old, late bound) and a job without one for ``default_s``.

    ``running`` (``with_running``): per team, the attempts still running, what they have
    held so far ÷ their limit: lower bounds of their fractions. A short attempt is learned
    from at once and a long one only once it ends, so the finished ones alone run short
    (most where run times are heavy-tailed); with them the fraction is a Kaplan-Meier
    mean (the area under the survival curve up to the limit) and quantile."""

    fractions: Mapping[str, Sequence[float]] = field(default_factory=dict)
    durations: Mapping[str, Sequence[float]] = field(default_factory=dict)
    default_s: float | None = None
    running: Mapping[str, Sequence[float]] = field(default_factory=dict)

    def with_running(self, snap: Snapshot) -> RuntimeModel:
        """This model with ``snap``'s running attempts (those with a limit) as ``running``."""
        running: dict[str, list[float]] = {}
        for a in snap.active:
            limit = a.entry.max_runtime_s
            if limit:
                held = max((snap.now - a.started_at).total_seconds(), 0.0)
                running.setdefault(a.entry.team, []).append(min(held / limit, 1.0))
        return replace(self, running=running)

    def _pick(self, team: str, by: Mapping[str, Sequence[float]]) -> Sequence[float]:
        own = by.get(team, ())
        if len(own) >= _MIN_SAMPLES:
            return own
        pooled = [x for xs in by.values() for x in xs]
        return pooled if len(pooled) >= _MIN_SAMPLES else ()

    def fraction(self, team: str, q: float | None) -> float:
        """The mean (``q`` None: what a sum of many jobs runs) or the ``q`` quantile of the
        team's run time ÷ limit; 1.0 without history."""
        xs = self._pick(team, self.fractions)
        if not xs:
            return 1.0
        own = len(self.fractions.get(team, ())) >= _MIN_SAMPLES
        bounds = (
            list(self.running.get(team, ()))
            if own
            else [x for v in self.running.values() for x in v]
        )
        if q is not None:
            v = _km_quantiles(xs, bounds, (q,))[0]
        elif bounds:
            v = _km_mean(xs, bounds, upto=1.0)
        else:
            v = sum(xs) / len(xs)
        return min(max(v, 0.0), 1.0)

    def duration(self, team: str, q: float | None) -> float | None:
        xs = self._pick(team, self.durations)
        if not xs:
            return self.default_s
        return sum(xs) / len(xs) if q is None else _quantile(xs, q)


def _km_mean(seen: Sequence[float], bounds: Sequence[float], *, upto: float) -> float:
    """The mean of a value at most ``upto`` of which ``seen`` were observed and ``bounds``
    are lower bounds: the area under the Kaplan-Meier survival curve from 0 to ``upto``."""
    pts = sorted([(x, 0) for x in seen] + [(x, 1) for x in bounds])
    n, surv, last, area = len(pts), 1.0, 0.0, 0.0
    for x, bound in pts:
        x = min(x, upto)
        if not bound:
            area += surv * (x - last)
            last = x
            surv *= 1.0 - 1.0 / n
        n -= 1
    return area + surv * (upto - last)


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]


def _km_quantiles(
    seen: Sequence[float], waiting: Sequence[float], qs: Sequence[float]
) -> list[float]:
    """The ``qs`` quantiles of a ratio of which ``seen`` were observed and ``waiting`` are
    only lower bounds (jobs still waiting: their ratio is at least that): Kaplan-Meier.
    Without the waiting ones a short wait is learned at once and a long one only once it
    ends, so the ratios seen run low while waits grow. Without ``waiting``: ``_quantile``'s.
    A quantile the seen ones never reach is the largest bound (the most that is known)."""
    if not waiting:
        return [_quantile(seen, q) for q in qs]
    pts = sorted([(x, 0) for x in seen] + [(x, 1) for x in waiting])
    out: list[float | None] = [None] * len(qs)
    order = sorted(range(len(qs)), key=lambda k: qs[k])
    at, n, surv = 0, len(pts), 1.0
    for x, bound in pts:
        if not bound:
            surv *= 1.0 - 1.0 / n
            while at < len(order) and 1.0 - surv >= qs[order[at]] - 1e-12:
                out[order[at]] = x
                at += 1
        n -= 1
    top = pts[-1][0]
    return [top if v is None else v for v in out]


@dataclass(frozen=True, kw_only=True)
class EtaModel:
    """What the estimates learn online. ``runtime``: how long attempts hold capacity.
    ``wait_ratios``: per team and priority class, for recently started jobs, the actual
    wait ÷ the wait the forward run predicted at their first estimate (from when it was
    made; only
    predictions of at least ``LONG_WAIT_S``): what the forward run cannot see (fair-share
    preemption, arrivals ahead in the fair order, priorities) shows as a bias per team and
    class. A predicted wait is scaled by their median (the estimate) and their ``p90_q``
    quantile (the p90), once there are ``_MIN_CALIBRATION`` of them (else the class's over
    all teams, else all); until
    then the estimate is the forward run's and the p90 scales it by the team's ``p90_q``
    quantile of run-time fractions ÷ their mean (every job ahead running that long)."""

    runtime: RuntimeModel = field(default_factory=RuntimeModel)
    wait_ratios: Mapping[tuple[str, str], Sequence[float]] = field(default_factory=dict)
    # Per team and class, the jobs still waiting for their first start whose first
    # prediction was at least ``LONG_WAIT_S``: wait so far ÷ predicted wait, a lower bound
    # of their ratio (``WaitHistory.waiting``). Empty: the ratios seen only.
    waiting: Mapping[tuple[str, str], Sequence[float]] = field(default_factory=dict)
    p90_q: float = 0.9
    # Expected arrivals (``_Arrivals``): each team goes on submitting as it did over the
    # last ``arrival_window_s`` (its jobs then, again and again), at a rate that fades
    # with time constant ``arrival_fade_s`` (how long a submit stream is expected to last);
    # each lands in the fair order where its team's next job would. None: no arrivals (the
    # queue of now only).
    arrival_window_s: float | None = 7200.0
    arrival_fade_s: float = 12 * 3600.0
    # How much of the calibration the estimate takes (``shrink``): for recently started
    # jobs that waited at least ``LONG_WAIT_S``, over all teams, (actual wait ÷ predicted
    # wait, the scale the calibration gave at their first estimate). Empty: all of it.
    checks: Sequence[tuple[float, float]] = ()
    shrink_levels: Sequence[float] = (1.0, 0.75, 0.5, 0.25, 0.0)

    @cached_property
    def shrink(self) -> float:
        """The power of the calibration's scale the estimate takes (1: all of it, 0: the
        forward run's prediction): of ``shrink_levels``, the one whose median relative error
        |actual - estimate| / actual wait over the recent first estimates (``checks``) is
        lowest, ties to the larger. The ratios are learned only once waits end, so while
        the queue changes they lag and on some days pull the estimates the wrong way; on
        others they fix the forward run. Which, is measured online on the jobs that
        started, as the ETA bar is. With fewer than ``_MIN_CALIBRATION`` checks, 1."""
        if len(self.checks) < _MIN_CALIBRATION:
            return 1.0
        best, err = 1.0, math.inf
        for a in sorted(self.shrink_levels, reverse=True):
            e = _quantile([abs(r - s**a) / r for r, s in self.checks], 0.5)
            if e < err:
                best, err = a, e
        return best

    @cached_property
    def _wait_spread(self) -> float:
        """Every team's waits around their median: their ``p90_q`` quantile ÷ their median
        (with the jobs still waiting as lower bounds); once per model, not per team."""
        every = [x for v in self.wait_ratios.values() for x in v]
        if not every:
            return 1.0
        waiting = [x for v in self.waiting.values() for x in v]
        e50, e90 = _km_quantiles(every, waiting, (0.5, self.p90_q))
        return e90 / max(e50, 1e-9)

    def scales(self, team: str, priority: str, *, calibrated: bool = True) -> tuple[float, float]:
        """(estimate, p90) multipliers of a predicted wait for ``team``'s jobs of
        ``priority``: from their own ratios, else their class's over all teams, else all;
        the p90 with the jobs of the same scope still ``waiting`` as lower bounds
        (``_km_quantiles``)."""

        def scope(by: Mapping[tuple[str, str], Sequence[float]], level: int) -> list[float]:
            if level == 0:
                return list(by.get((team, priority), ()))
            return [x for (_, c), v in by.items() if level == 2 or c == priority for x in v]

        level = 0
        xs = scope(self.wait_ratios, 0)
        while len(xs) < _MIN_CALIBRATION and level < 2:
            level += 1
            xs = scope(self.wait_ratios, level)
        mean = self.runtime.fraction(team, None)
        spread = self.runtime.fraction(team, self.p90_q) / mean if mean > 0 else 1.0
        if calibrated and len(xs) >= _MIN_CALIBRATION:
            # The estimate: the median of the ratios seen. The p90: the spread of the waits
            # seen with the jobs still waiting as lower bounds (a short wait is learned at
            # once, a long one only once it ends: the seen ones alone run low while waits
            # grow), and at least that of the run times ahead and that of every team's
            # waits around their median. (The bounds in the median too moved it by -0.04
            # to +0.12 on seven days, worse on three: docs/scheduling.md.)
            mid = _quantile(xs, 0.5)
            (top,) = _km_quantiles(xs, scope(self.waiting, level), (self.p90_q,))
            return mid, max(top, mid * spread, mid * self._wait_spread, 1.0)
        return 1.0, max(spread, 1.0)


class Eta(NamedTuple):
    start: datetime  # the estimate
    p90: datetime  # 9 in 10 start by then
    predicted: datetime  # the forward run's start, before calibration (what it learns from)
    # The calibration's scale of the predicted wait, whether the estimate took it all or
    # not (``EtaModel.shrink``): what the choice of how much to take learns from.
    scale: float = 1.0


class RuntimeHistory:
    """The live loop's ``RuntimeModel``, learned online from its snapshots: an attempt seen
    active at one tick and gone at the next held its capacity from its start to then
    (finished or preempted); per team the last ``keep`` such lengths ÷ max_runtime (or, for
    jobs without one, the lengths). Starts empty (a restart forgets: the first ETAs hold
    jobs to their limit until attempts end)."""

    def __init__(self, *, keep: int = 200) -> None:
        self.keep = keep
        self.fractions: dict[str, list[float]] = {}
        self.durations: dict[str, list[float]] = {}
        self._active: dict[tuple[str, datetime], ActiveJob] = {}

    def observe(self, snap: Snapshot) -> RuntimeModel:
        seen = {(a.entry.job_id, a.started_at): a for a in snap.active}
        for key, a in self._active.items():
            if key in seen:
                continue
            held = max((snap.now - a.started_at).total_seconds(), 0.0)
            limit = a.entry.max_runtime_s
            if limit:
                xs = self.fractions.setdefault(a.entry.team, [])
                xs.append(min(held / limit, 1.0))
            else:
                xs = self.durations.setdefault(a.entry.team, [])
                xs.append(held)
            del xs[: -self.keep]
        self._active = seen
        return self.model()

    def model(self) -> RuntimeModel:
        return RuntimeModel(
            fractions={t: tuple(v) for t, v in self.fractions.items()},
            durations={t: tuple(v) for t, v in self.durations.items()},
        )


class WaitHistory:
    """The live loop's ``EtaModel.wait_ratios``, learned online: each queued job's first
    estimate (when made, the forward run's predicted start) is kept until the job is seen
    running; then its actual wait ÷ the predicted one is recorded for its team (the last
    ``keep``), if the prediction was at least ``LONG_WAIT_S`` away. A job that leaves the
    queue otherwise (cancelled, deleted) is forgotten. Starts empty after a restart."""

    def __init__(self, *, keep: int = 200) -> None:
        self.keep = keep
        self.ratios: dict[tuple[str, str], list[float]] = {}  # (team, priority) -> ratios
        self.checks: list[tuple[float, float]] = []  # ``EtaModel.checks``
        # job -> ((team, priority), when estimated, the predicted start, the scale)
        self._first: dict[str, tuple[tuple[str, str], datetime, datetime, float]] = {}

    def observe(self, snap: Snapshot) -> dict[tuple[str, str], tuple[float, ...]]:
        """Record the starts this snapshot shows; the ratios per team and class."""
        if self._first:
            queued = {e.job_id for e in snap.queued}
            for a in snap.active:
                got = self._first.pop(a.entry.job_id, None)
                if got is None:
                    continue
                key, made, predicted, scale = got
                wait = (predicted - made).total_seconds()
                if wait >= LONG_WAIT_S:
                    waited = max((a.started_at - made).total_seconds(), 0.0)
                    xs = self.ratios.setdefault(key, [])
                    xs.append(waited / wait)
                    del xs[: -self.keep]
                    if waited >= LONG_WAIT_S:
                        self.checks.append((waited / wait, scale))
                        del self.checks[: -self.keep]
            for i in [i for i in self._first if i not in queued]:
                del self._first[i]
        return {t: tuple(v) for t, v in self.ratios.items()}

    def estimated(self, snap: Snapshot, etas: Mapping[str, Eta]) -> None:
        """Keep the first estimate of each job that got one at this snapshot."""
        teams = None
        for i, eta in etas.items():
            if i in self._first:
                continue
            if teams is None:
                teams = {e.job_id: (e.team, e.priority) for e in snap.queued}
            if i in teams:
                self._first[i] = (teams[i], snap.now, eta.predicted, eta.scale)

    def waiting(self, now: datetime) -> dict[tuple[str, str], list[float]]:
        """``EtaModel.waiting``: per team and class, the jobs estimated and still queued
        whose prediction was at least ``LONG_WAIT_S`` away, their wait so far ÷ it."""
        out: dict[tuple[str, str], list[float]] = {}
        for key, made, predicted, _ in self._first.values():
            wait = (predicted - made).total_seconds()
            if wait >= LONG_WAIT_S:
                out.setdefault(key, []).append(max((now - made).total_seconds(), 0.0) / wait)
        return out
