"""The queue as one pass reads it: per team in static order, and per gang shape its count,
whether any job of it may borrow, and its jobs' run-time bounds in order. Pure.

``policy.planner`` builds one from ``Snapshot.queued`` (one linear pass and a sort), unless the
snapshot carries one: the simulator keeps its ``QueueIndex`` across ticks (``add`` /
``remove`` as jobs queue and start), so a tick's pass costs what it reads (the jobs it
considers), not the whole queue.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from service.policy.queue_entry import QueueEntry

__all__ = ["QueueIndex", "Shape", "ShapeStats", "bound_left", "shape_of", "static_key"]

# (num_workers, cpus_per_worker, gpus_per_worker, accelerator types accepted)
Shape = tuple[int, float, float, tuple[str, ...]]
StaticKey = tuple[int, datetime, str]


def shape_of(e: QueueEntry) -> Shape:
    return (e.num_workers, e.cpus_per_worker, e.gpus_per_worker, e.accelerators)


def static_key(entry: QueueEntry, *, use_priority: bool) -> StaticKey:
    """The part of the order that does not depend on what the team holds: (class rank,
    waiting since, id); without priority every job is of one class."""
    key = entry.order_key
    return key if use_priority else (1, key[1], key[2])


def bound_left(e: QueueEntry) -> float:
    """Run time left to its max_runtime bound (inf: unbounded)."""
    return math.inf if e.max_runtime_s is None else e.max_runtime_s - e.run_s


@dataclass(kw_only=True)
class ShapeStats:
    count: int = 0
    preemptible: int = 0
    # (bound left, job id) of its queued jobs, ascending: the pass reads the least bound
    # among the jobs it has not considered yet.
    lefts: list[tuple[float, str]] = field(default_factory=list)


class QueueIndex:
    """See the module docstring. ``per_team[team]``: (static key, entry) ascending."""

    def __init__(self, *, use_priority: bool) -> None:
        self.use_priority = use_priority
        self.per_team: dict[str, list[tuple[StaticKey, QueueEntry]]] = {}
        self.shapes: dict[Shape, ShapeStats] = {}
        self.team_shapes: dict[str, Counter[Shape]] = {}  # queued jobs per team and shape
        self.size = 0
        self.by_id: dict[str, QueueEntry] = {}

    @classmethod
    def build(cls, entries: Iterable[QueueEntry], *, use_priority: bool) -> QueueIndex:
        idx = cls(use_priority=use_priority)
        for e in entries:
            key = static_key(e, use_priority=use_priority)
            idx.per_team.setdefault(e.team, []).append((key, e))
            idx._count(e).lefts.append((bound_left(e), e.job_id))
            idx.size += 1
            idx.by_id[e.job_id] = e
        for rows in idx.per_team.values():
            rows.sort(key=lambda ke: ke[0])
        for stats in idx.shapes.values():
            stats.lefts.sort()
        return idx

    def _count(self, e: QueueEntry) -> ShapeStats:
        stats = self.shapes.get(shape_of(e))
        if stats is None:
            stats = self.shapes[shape_of(e)] = ShapeStats()
        stats.count += 1
        stats.preemptible += e.preemptible
        self.team_shapes.setdefault(e.team, Counter())[shape_of(e)] += 1
        return stats

    def add(self, e: QueueEntry) -> None:
        key = static_key(e, use_priority=self.use_priority)
        rows = self.per_team.setdefault(e.team, [])
        rows.insert(bisect.bisect(rows, key, key=lambda ke: ke[0]), (key, e))
        bisect.insort(self._count(e).lefts, (bound_left(e), e.job_id))
        self.size += 1
        self.by_id[e.job_id] = e

    def remove(self, e: QueueEntry) -> None:
        key = static_key(e, use_priority=self.use_priority)
        rows = self.per_team[e.team]
        i = bisect.bisect_left(rows, key, key=lambda ke: ke[0])
        assert rows[i][1].job_id == e.job_id
        del rows[i]
        if not rows:
            del self.per_team[e.team]
        sh = shape_of(e)
        stats = self.shapes[sh]
        stats.count -= 1
        stats.preemptible -= e.preemptible
        mine = self.team_shapes[e.team]
        mine[sh] -= 1
        if mine[sh] == 0:
            del mine[sh]
            if not mine:
                del self.team_shapes[e.team]
        left = (bound_left(e), e.job_id)
        del stats.lefts[bisect.bisect_left(stats.lefts, left)]
        if stats.count == 0:
            del self.shapes[sh]
        self.size -= 1
        del self.by_id[e.job_id]

    def sync(self, entries: Iterable[QueueEntry]) -> QueueIndex:
        """This index made to hold exactly ``entries``, kept across ticks (the live loop): an
        entry that is the same object as the one held stays where it is, any other is
        removed or added. A new index instead when most of it would change."""
        new = {e.job_id: e for e in entries}
        gone = [e for i, e in self.by_id.items() if new.get(i) is not e]
        came = [e for i, e in new.items() if self.by_id.get(i) is not e]
        if len(gone) + len(came) > max(len(new), self.size) // 4:
            return QueueIndex.build(new.values(), use_priority=self.use_priority)
        for e in gone:
            self.remove(e)
        for e in came:
            self.add(e)
        return self

    def update(self, changed: Mapping[str, QueueEntry | None]) -> None:
        """Job id -> its entry now (None: no longer queued), for the jobs that may have
        changed; the others are kept. An entry that is the same object stays where it is."""
        for job_id, e in changed.items():
            old = self.by_id.get(job_id)
            if old is e:
                continue
            if old is not None:
                self.remove(old)
            if e is not None:
                self.add(e)

    def __len__(self) -> int:
        return self.size
