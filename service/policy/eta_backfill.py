"""The ETA forward run with backfill (issue 30; ``eta.estimate_ranges``): work-conserving
as the policy is, EASY reservations (per type on a mixed cluster, as the plan keeps them:
``type_reservations.may_hold_beside``), expected run times, expected arrivals. Pure."""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from service.policy.capacity import EPS, FreeBuckets
from service.policy.eta_arrivals import Arrivals
from service.policy.eta_forward import charge, free_nodes, has_quotas, over_quota
from service.policy.eta_model import RuntimeModel
from service.policy.snapshot import ActiveJob, QueueEntry, Snapshot, TeamUsage
from service.policy.type_reservations import may_hold_beside

Line = tuple[str, int, float, float, tuple[str, ...]]  # (team, shape, accepted types)


class Backfill:
    """The forward run of ``estimate_ranges``: per node free capacity and the ends of the
    jobs on it; waiting jobs in per-(team, shape) lines in policy order (a line's head is
    the only one of it that can start: the same shape behind the same head), so each event
    costs O(lines), not O(queue)."""

    def __init__(self, snap: Snapshot, runtime: RuntimeModel) -> None:
        self.snap, self.runtime, self.q = snap, runtime, None
        self.placed: dict[str, QueueEntry] = {}  # the real jobs placed by ``run``
        self._fractions: dict[str, float] = {}  # per team, this run's
        self._durations: dict[str, float | None] = {}
        self.now = snap.now
        self.ends: list[tuple[datetime, int, list[int], QueueEntry]] = []
        self.seq = itertools.count()
        self.usage: dict[str, TeamUsage] = {}
        self.quotas = has_quotas(snap)
        nodes, placements = free_nodes(snap)
        self.free = FreeBuckets(nodes)
        self.index = {nid: i for i, nid in enumerate(self.free.ids)}
        # True free per node (the buckets show a reserved node as empty).
        self.cpus = list(self.free.cpus)
        self.gpus = list(self.free.gpus)
        self.on_node: list[list[tuple[datetime, int, float, float]]] = [[] for _ in nodes]
        soon = snap.now + timedelta(seconds=1)
        for a, placement in zip(snap.active, placements, strict=True):
            self._charge(a.entry, 1)
            if placement is None:
                continue
            end = self._running_end(a)
            if end is None:
                continue  # holds its nodes for ever
            end = max(end, soon)
            self._push(end, [self.index[n] for n in placement if n in self.index], a.entry)
        # node -> the reserved start on it and what its holder needs there (cpus, gpus)
        self.reserved: dict[int, tuple[datetime, float, float]] = {}

    def _running_end(self, a: ActiveJob) -> datetime | None:
        e, end = a.entry, a.expected_end_at
        if e.max_runtime_s is None:
            if end is not None:
                return end
            d = self.runtime.duration(e.team, self.q)
            return None if d is None else max(a.started_at + timedelta(seconds=d), self.now)
        bound = a.started_at + timedelta(seconds=max(e.max_runtime_s - e.run_s, 0.0))
        if end is not None and abs((end - bound).total_seconds()) > 1.0:
            return end  # from its step rate
        held = e.max_runtime_s * self._fraction(e.team)
        return max(min(a.started_at + timedelta(seconds=held), bound), self.now)

    def _fraction(self, team: str) -> float:
        f = self._fractions.get(team)
        if f is None:
            f = self._fractions[team] = self.runtime.fraction(team, self.q)
        return f

    def _expected_s(self, e: QueueEntry) -> float | None:
        """How long ``e``'s next attempt holds its capacity: the team's attempts' (to their
        end or preemption) fraction of the limit, bounded by what is left of it."""
        if e.max_runtime_s is None:
            if e.team not in self._durations:
                self._durations[e.team] = self.runtime.duration(e.team, self.q)
            return self._durations[e.team]
        return min(e.max_runtime_s * self._fraction(e.team), max(e.max_runtime_s - e.run_s, 0.0))

    def _push(self, end: datetime, nodes: list[int], e: QueueEntry) -> None:
        t = next(self.seq)
        heapq.heappush(self.ends, (end, t, nodes, e))
        for i in dict.fromkeys(nodes):
            n = nodes.count(i)
            self.on_node[i].append((end, t, n * e.cpus_per_worker, n * e.gpus_per_worker))

    def _set(self, i: int) -> None:
        """Show node ``i``'s free capacity, a reserved node's too (``_place``)."""
        self.free.set(i, cpus=self.cpus[i], gpus=self.gpus[i])

    def _place(self, e: QueueEntry) -> list[int] | None:
        """Where ``e`` starts now, EASY: on a reserved node only if it is expected to end
        before the reserved start, or leaves that node what the reserved job needs; else
        on what the reservation leaves (its nodes shown less what it needs)."""
        got = self.free.place(e)
        if got is None or not self.reserved or not any(i in self.reserved for i in got):
            return got
        d = self._expected_s(e)
        by = min(self.reserved[i][0] for i in got if i in self.reserved)
        if d is not None and self.now + timedelta(seconds=d) <= by:
            return got
        for i, (_, c, g) in self.reserved.items():
            self.free.set(i, cpus=max(self.cpus[i] - c, 0.0), gpus=max(self.gpus[i] - g, 0.0))
        got = self.free.place(e)
        for i in self.reserved:
            self._set(i)
        return got

    def _give(self, nodes: list[int], e: QueueEntry, sign: int) -> None:
        for i in dict.fromkeys(nodes):
            n = nodes.count(i)
            self.cpus[i] += sign * n * e.cpus_per_worker
            self.gpus[i] += sign * n * e.gpus_per_worker
            self._set(i)

    def _charge(self, e: QueueEntry, sign: int) -> None:
        if self.quotas:
            charge(self.usage, e, sign)

    def _start(self, e: QueueEntry, nodes: list[int]) -> None:
        self._give(nodes, e, -1)
        self._charge(e, 1)
        d = self._expected_s(e)
        if d is not None:
            self._push(self.now + timedelta(seconds=d), nodes, e)

    def _release(self) -> bool:
        if not self.ends:
            return False
        end, t, nodes, e = heapq.heappop(self.ends)
        self.now = max(self.now, end)
        for i in dict.fromkeys(nodes):
            self.on_node[i] = [x for x in self.on_node[i] if x[1] != t]
        self._give(nodes, e, 1)
        self._charge(e, -1)
        return True

    def _reserve(self, e: QueueEntry) -> list[int] | None:
        """The nodes that free up soonest for one worker each of ``e`` (a worker per node:
        a gang of whole-node workers exactly, smaller ones late at worst), reserved for
        it from the latest of those times (what others start there stops by then:
        ``_borrow``); None if too few nodes could ever hold a worker. A job that asks for
        types: on one type's nodes, the one free soonest (the first in its order on a tie)."""
        times: list[tuple[datetime, int]] = []
        acc = e.accelerators
        for i in range(len(self.cpus)):
            if acc and self.free.accel[i] not in acc:
                continue
            c, g = self.cpus[i], self.gpus[i]
            at = self.now
            if not (c + EPS >= e.cpus_per_worker and g + EPS >= e.gpus_per_worker):
                ok = False
                for end, _, jc, jg in sorted(self.on_node[i]):
                    c, g, at = c + jc, g + jg, end
                    if c + EPS >= e.cpus_per_worker and g + EPS >= e.gpus_per_worker:
                        ok = True
                        break
                if not ok:
                    continue
            times.append((at, i))
        k = e.num_workers
        if len(acc) > 1:
            per = [sorted(x for x in times if self.free.accel[x[1]] == t) for t in acc]
            per = [p for p in per if len(p) >= k]
            times = min(per, key=lambda p: p[k - 1][0]) if per else []
        if len(times) < k:
            return None
        times.sort()
        chosen = [i for _, i in times[:k]]
        at = times[k - 1][0]
        for i in chosen:
            self.reserved[i] = (at, e.cpus_per_worker, e.gpus_per_worker)
        return chosen

    def _fits_reserved(self, e: QueueEntry, nodes: list[int]) -> bool:
        return all(
            self.cpus[i] + EPS >= e.cpus_per_worker and self.gpus[i] + EPS >= e.gpus_per_worker
            for i in nodes
        )

    def run(
        self,
        queue: Sequence[QueueEntry],
        *,
        want: Collection[str] | None,
        arrivals: Arrivals | None = None,
    ) -> dict[str, datetime]:
        """``queue`` in policy order; ``arrivals``: jobs expected to be submitted, each
        joining the run at its time and position (``Arrivals``)."""
        out: dict[str, datetime] = {}
        self.placed = {}  # the real jobs in ``out``
        missing = set(want) if want is not None else None
        if missing is not None and not missing:
            return out
        left = len(queue)  # real jobs not placed yet

        def line_of(e: QueueEntry) -> Line:
            return (
                e.team if self.quotas else "",
                e.num_workers,
                e.cpus_per_worker,
                e.gpus_per_worker,
                tuple(e.accelerators),
            )

        lines: dict[Line, list[tuple[float, QueueEntry]]] = {}
        for n, e in enumerate(queue):
            lines.setdefault(line_of(e), []).append((float(n), e))
        heads = dict.fromkeys(lines, 0)  # next waiting job of each line
        live = list(lines)  # the lines with a job waiting
        teams = self.snap.teams
        dead: set[Line] = set()  # lines that cannot start now
        # The reservations: the first blocked job's, and one per set of types no holder
        # shares (``may_hold_beside``); on an untyped cluster never more than one.
        holds: list[tuple[QueueEntry, list[int]]] = []
        typed = any(key[4] for key in lines)  # some job asks for types

        def ready() -> int | None:
            return next((n for n, h in enumerate(holds) if self._fits_reserved(*h)), None)

        def done(e: QueueEntry) -> bool:
            nonlocal left
            if arrivals is not None and e.job_id in arrivals.ids:
                return False  # an expected arrival: it only holds capacity
            out[e.job_id] = self.now
            self.placed[e.job_id] = e
            left -= 1
            if missing is not None:
                missing.discard(e.job_id)
                return not missing
            return left == 0

        def take(key: Line) -> None:
            heads[key] += 1
            if heads[key] >= len(lines[key]):
                live.remove(key)

        while True:
            while (r := ready()) is not None:
                e, nodes = holds.pop(r)
                for i in nodes:
                    del self.reserved[i]
                dead.clear()  # what the reservation held back is free again
                placed = self.free.place(e)
                if placed is None:  # cannot happen: its nodes fit one worker each
                    placed = nodes
                self._start(e, placed)
                if done(e):
                    return out
            while True:
                best: tuple[float, QueueEntry, list[int], Line] | None = None
                first: tuple[float, QueueEntry, Line] | None = None
                top = self.free.max_gpus()
                for key in live:
                    pos, e = lines[key][heads[key]]
                    if first is None or pos < first[0]:
                        first = (pos, e, key)
                    if key in dead or (best is not None and pos > best[0]):
                        continue
                    if e.gpus_per_worker > top + EPS:
                        dead.add(key)
                        continue
                    if self.quotas:
                        quota = teams[e.team].quota if e.team in teams else None
                        if over_quota(e, self.usage.get(e.team, TeamUsage()), quota):
                            dead.add(key)
                            continue
                    got = self._place(e)
                    if got is not None:
                        best = (pos, e, got, key)
                    else:
                        dead.add(key)  # until capacity grows: it only shrinks meanwhile
                if best is not None or holds:
                    first = None  # the first reservation: when nothing fits and none is held
                if holds and typed:
                    # Beside a reservation, the first blocked job (ahead of what would start)
                    # whose types no holder accepts gets its own before anything starts, as
                    # in the plan's pass; none on an untyped cluster (``may_hold_beside``).
                    them = [h[0] for h in holds]
                    for key in live:
                        pos, e = lines[key][heads[key]]
                        if (
                            key[4]
                            and (best is None or pos < best[0])
                            and (first is None or pos < first[0])
                            and may_hold_beside(e, them)
                        ):
                            first = (pos, e, key)
                if first is not None:
                    pos, e, key = first
                    hold = self._reserve(e)
                    if hold is not None:
                        take(key)
                        holds.append((e, hold))
                        if self._fits_reserved(e, hold):
                            break  # starts at once (the outer loop)
                        continue
                if best is not None:
                    pos, e, got, key = best
                    take(key)
                    self._start(e, got)
                    if done(e):
                        return out
                    continue
                break
            if ready() is not None:
                continue
            if not live and not holds:
                return out
            at = arrivals.next_at() if arrivals is not None else None
            if at is not None and (not self.ends or at < self.ends[0][0]):
                assert arrivals is not None
                self.now = max(self.now, at)
                for pos, e in arrivals.due(self.now):
                    key = line_of(e)
                    typed = typed or bool(key[4])
                    line = lines.setdefault(key, [])
                    h = heads.setdefault(key, 0)
                    if h >= len(line):
                        live.append(key)
                    bisect.insort(line, (pos, e), lo=h, key=lambda x: x[0])
                continue  # no capacity freed: the dead lines stay dead
            if not self._release():
                return out
            dead.clear()
