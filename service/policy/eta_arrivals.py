"""Expected arrivals for the ETA forward run (issue 30): the jobs each team is expected
to go on submitting, placed where its next job would land in the fair order. Pure."""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from service.policy.fairshare import HORIZON_S, GpuTypes, dominant_share
from service.policy.snapshot import QueueEntry, Snapshot
from shunter.jobspec.vocab import priority_rank


class Arrivals:
    """Jobs expected to be submitted while the forward run goes on: each team submits as it
    did over the last ``window_s`` (the jobs it submitted then that are still queued or
    running, in submit order, again and again) at a rate that fades as exp(-t / ``fade_s``)
    from now. What a job waits depends on them: a team with a short backlog that goes on
    submitting goes ahead of a long one's tail in the fair order; a team that stopped
    delays nobody (a queue that only drains is estimated as it is).

    Each lands where its team's next job would in ``policy.planner``'s order: its class, then
    its team's fair key (``fairshare.fair_key``: the team's share held, plus all it has
    queued and the arrivals before it, x ``HORIZON_S``, less what it is owed, / weight),
    i.e. behind its team's queue and ahead of the jobs of teams whose key there is larger.
    Keys are those of now (what is owed and held moves as the run goes: not modelled)."""

    def __init__(self, snap: Snapshot, fade_s: float) -> None:
        self.snap, self.fade_s = snap, fade_s
        self.total = (sum(n.cpus for n in snap.totals), sum(n.gpus for n in snap.totals))
        self.ids: set[str] = set()
        self.copies: dict[tuple[str, int], QueueEntry] = {}  # (team, k) -> its arrival
        self.heap: list[tuple[datetime, int, str]] = []  # (next arrival, seq, team)
        self.per_team: dict[str, tuple[list[QueueEntry], float, int]] = {}  # jobs, gap, k
        self.ranks: dict[str, tuple[int, ...]] = {}  # team -> the classes it submits
        self.cum: dict[str, list[float]] = {}  # team -> [cpus, gpus] charged so far
        # A mixed cluster's types: then GPUs charged per type too (team -> type -> GPUs).
        self.types = GpuTypes.of(snap.totals, snap.type_weights)
        self.cum_typed: dict[str, dict[str, float]] = {}
        self.keys: list[tuple[int, float]] = []  # the queue's (class, fair key), in order
        self.seq = itertools.count()
        self.last = math.inf  # arrivals placed after this position are left out

    @classmethod
    def of(
        cls,
        snap: Snapshot,
        queue: Sequence[QueueEntry],
        *,
        window_s: float,
        fade_s: float,
        want: Collection[str] | None = None,
    ) -> Arrivals | None:
        """None when no team submitted within the window (nothing to expect). With
        ``want``, arrivals behind the last of those jobs in order are left out: they could
        only backfill around them (the forward run leaves out the queue past its depth
        alike)."""
        since = snap.now - timedelta(seconds=window_s)
        recent: dict[str, list[QueueEntry]] = {}
        queued: dict[str, list[float]] = {}
        types = GpuTypes.of(snap.totals, snap.type_weights)
        typed: dict[str, dict[str, float]] = {}  # team -> type -> GPUs held and queued
        for e in snap.queued:
            q = queued.setdefault(e.team, [0.0, 0.0])
            q[0] += e.cpus
            q[1] += e.gpus
            if types is not None:
                types.charge(typed.setdefault(e.team, {}), e.gpus, None, e.accelerators)
            if since <= e.created_at <= snap.now:
                recent.setdefault(e.team, []).append(e)
        for a in snap.active:
            if since <= a.entry.created_at <= snap.now:
                recent.setdefault(a.entry.team, []).append(a.entry)
        if not recent:
            return None
        self = cls(snap, fade_s)
        if want is not None:
            wanted = set(want)
            self.last = max((i for i, e in enumerate(queue) if e.job_id in wanted), default=-1)
        held: dict[str, list[float]] = {}
        ahead_t: dict[str, dict[str, float]] = {}  # team -> type -> GPUs held and ahead
        if types is not None:
            for a in snap.active:
                for into in (typed, ahead_t):
                    t = into.setdefault(a.entry.team, {})
                    types.charge(t, a.entry.gpus, a.accelerator, a.entry.accelerators)
        if snap.held is not None:
            held = {t: [c, g] for t, (_, c, g) in snap.held.items()}
        else:
            for a in snap.active:
                h = held.setdefault(a.entry.team, [0.0, 0.0])
                h[0] += a.entry.cpus
                h[1] += a.entry.gpus
        # The queue's keys as the order read them (the share held plus the jobs of the team
        # ahead), kept non-decreasing per class so an arrival's place is a bisection.
        ahead = {t: list(h) for t, h in held.items()}
        last: dict[int, float] = {}
        # Only the keys up to the last job estimated: an arrival placed past it is left out.
        for e in queue if math.isinf(self.last) else queue[: int(self.last) + 1]:
            r = priority_rank(e.priority)
            u = ahead.setdefault(e.team, [0.0, 0.0])
            k = max(self._key(e.team, u, ahead_t.get(e.team)), last.get(r, -math.inf))
            last[r] = k
            self.keys.append((r, k))
            u[0] += e.cpus
            u[1] += e.gpus
            if types is not None:
                types.charge(ahead_t.setdefault(e.team, {}), e.gpus, None, e.accelerators)
        for team, seen in recent.items():
            seen.sort(key=lambda e: (e.created_at, e.job_id))
            self.ids.update(f"~{team}~{k}" for k in range(len(seen)))
            h, q = held.get(team, [0.0, 0.0]), queued.get(team, [0.0, 0.0])
            self.cum[team] = [h[0] + q[0], h[1] + q[1]]
            self.cum_typed[team] = typed.get(team, {})
            self.per_team[team] = (seen, window_s / len(seen), 0)
            self.ranks[team] = tuple(sorted({priority_rank(e.priority) for e in seen}))
            self._push(team)
        return self

    def _push(self, team: str) -> None:
        """Schedule the team's next arrival, if its stream has one left: at rate r = 1 / gap
        fading as exp(-t / fade), r x fade arrivals in all, the k-th (from 0) when the
        expected count r x fade x (1 - exp(-t / fade)) reaches k + 1/2.

        A stream all of whose arrivals land past the last job asked for ends here: the
        team's fair key only grows with what it is charged, so once its next arrival of
        every class it submits lands past it, every later one does too (each would only
        be left out; the forward run's events at their times start nothing).
        The sequence number is drawn all the same, so the ties between the arrivals
        kept break as before."""
        _, gap, k = self.per_team[team]
        left = 1.0 - (k + 0.5) * gap / self.fade_s
        seq = next(self.seq)
        if left > 0 and not self._past_last(team):
            t = -self.fade_s * math.log(left)
            heapq.heappush(self.heap, (self.snap.now + timedelta(seconds=t), seq, team))

    def _past_last(self, team: str) -> bool:
        """Whether the team's next arrival, of any class it submits, lands past the last
        job asked for."""
        if math.isinf(self.last):
            return False
        key = self._key(team, self.cum[team], self.cum_typed.get(team))
        return all(bisect.bisect_right(self.keys, (r, key)) > self.last for r in self.ranks[team])

    def _key(
        self, team: str, used: Sequence[float], by_type: dict[str, float] | None = None
    ) -> float:
        t = self.snap.teams.get(team)
        owed, weight = (t.owed_s, t.weight) if t is not None else (0.0, 1.0)
        cpus, gpus = self.total
        share = dominant_share(
            used[0], used[1], total_cpus=cpus, total_gpus=gpus, by_type=by_type, types=self.types
        )
        return (share * HORIZON_S - owed) / weight

    def _copy(self, team: str, jobs: Sequence[QueueEntry], k: int) -> QueueEntry:
        """The team's ``k``-th recent job as an arrival: made once, when first due."""
        got = self.copies.get((team, k))
        if got is None:
            got = replace(jobs[k], job_id=f"~{team}~{k}", queued_since=None, run_s=0.0)
            self.copies[(team, k)] = got
        return got

    def next_at(self) -> datetime | None:
        return self.heap[0][0] if self.heap else None

    def due(self, now: datetime) -> list[tuple[float, QueueEntry]]:
        """The arrivals by ``now``, each with its position among the queue's (a real job at
        position i is at i; an arrival just before the first real job it goes ahead of)."""
        out: list[tuple[float, QueueEntry]] = []
        while self.heap and self.heap[0][0] <= now:
            _, seq, team = heapq.heappop(self.heap)
            jobs, gap, k = self.per_team[team]
            src = jobs[k % len(jobs)]
            u = self.cum[team]
            key = (priority_rank(src.priority), self._key(team, u, self.cum_typed.get(team)))
            u[0] += src.cpus
            u[1] += src.gpus
            if self.types is not None:
                into = self.cum_typed.setdefault(team, {})
                self.types.charge(into, src.gpus, None, src.accelerators)
            i = bisect.bisect_right(self.keys, key)
            if i <= self.last:  # the copy only of an arrival kept
                out.append((i - 0.5 + seq * 1e-9, self._copy(team, jobs, k % len(jobs))))
            self.per_team[team] = (jobs, gap, k + 1)
            self._push(team)
        return out
