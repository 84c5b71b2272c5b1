"""The order queued jobs are considered in: priority class, then the team's weighted fair
share (``policy.fairshare.fair_key``, re-read at every pick, so placing a job for a team
moves that team back), then the time it has waited, then id. Pure.

It reads a ``QueueIndex`` (each team's jobs already in static order) and yields lazily: a
pass that stops after k jobs pays O(k log teams), not a sort of the whole queue."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Any

from service.policy.queue_index import QueueIndex, StaticKey, static_key
from service.policy.snapshot import QueueEntry

__all__ = ["PolicyOrder", "in_policy_order", "static_key"]

TeamKey = Callable[[str], tuple[float, ...]]


class PolicyOrder(Iterator[QueueEntry]):
    """The index's jobs in policy order, one ``next()`` at a time. ``team_key(team)`` (lower
    first) is re-read for the team of the job just yielded when the next one is asked for (a
    caller charges that team between picks; other teams' keys must not change meanwhile);
    None = no fair share (class, then waiting time). The index must not change meanwhile.

    With fair share it is one heap entry per team, ``(class rank, team key, since, id,
    team, position)``: ``heap`` and ``advance`` are public so a caller that only orders (the
    plan's ``order_rest``) can run the same merge without a call per job."""

    def __init__(self, index: QueueIndex, *, team_key: TeamKey | None) -> None:
        self.index, self.team_key = index, team_key
        self._merged: Iterator[tuple[StaticKey, QueueEntry]] | None = None
        self.heap: list[tuple[Any, ...]] = []
        self._yielded = False  # heap[0] was yielded and not yet advanced past
        if team_key is None:
            self._merged = heapq.merge(*index.per_team.values(), key=lambda ke: ke[0])
            return
        for team, rows in index.per_team.items():
            (rank, since, job_id), _ = rows[0]
            self.heap.append((rank, team_key(team), since, job_id, team, 0))
        heapq.heapify(self.heap)

    def advance(self, key: tuple[float, ...] | None = None) -> None:
        """Move past the job at the heap's top (its team's next job takes its place, keyed
        ``key`` or the team's key read now)."""
        heap = self.heap
        _, _, _, _, team, i = heap[0]
        rows = self.index.per_team[team]
        i += 1
        if i < len(rows):
            (rank, since, job_id), _ = rows[i]
            k = key if key is not None else self.team_key(team)  # type: ignore[misc]
            heapq.heapreplace(heap, (rank, k, since, job_id, team, i))
        else:
            heapq.heappop(heap)
        self._yielded = False

    def catch_up(self) -> None:
        """Advance past the job last yielded, if not done yet (before reading ``heap``)."""
        if self._yielded:
            self.advance()

    def __next__(self) -> QueueEntry:
        if self._merged is not None:
            entry: QueueEntry = next(self._merged)[1]
            return entry
        self.catch_up()
        if not self.heap:
            raise StopIteration
        team: str = self.heap[0][4]
        i: int = self.heap[0][5]
        self._yielded = True
        return self.index.per_team[team][i][1]


def in_policy_order(index: QueueIndex, *, team_key: TeamKey | None) -> PolicyOrder:
    """The index's jobs in policy order (``PolicyOrder``)."""
    return PolicyOrder(index, team_key=team_key)
