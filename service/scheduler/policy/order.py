"""The order queued jobs are considered in: priority class, then the team's weighted fair
share (``policy.fairshare.fair_key``, re-read at every pick, so placing a job for a team
moves that team back), then the time it has waited, then id. Pure."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime

from service.scheduler.policy.snapshot import PRIORITY_RANK, QueueEntry

__all__ = ["in_policy_order", "static_key"]


def static_key(entry: QueueEntry, *, use_priority: bool) -> tuple[int, datetime, str]:
    """The part of the order that does not depend on what the team holds."""
    rank = PRIORITY_RANK.get(entry.priority, 1) if use_priority else 1
    return (rank, entry.waiting_since, entry.job_id)


def in_policy_order(
    entries: Sequence[QueueEntry],
    *,
    use_priority: bool,
    team_key: Callable[[str], tuple[float, ...]] | None,
) -> Iterator[QueueEntry]:
    """Yield ``entries`` in policy order. ``team_key(team)`` (lower first) is re-read for the
    team of the job just yielded (a caller charges that team between picks; other teams'
    keys must not change meanwhile); None = no fair share (priority, then waiting time)."""
    if team_key is None:
        yield from sorted(entries, key=lambda e: static_key(e, use_priority=use_priority))
        return
    per_team: dict[str, deque[tuple[tuple[int, datetime, str], QueueEntry]]] = {}
    for k, e in sorted(
        ((static_key(e, use_priority=use_priority), e) for e in entries), key=lambda ke: ke[0]
    ):
        per_team.setdefault(e.team, deque()).append((k, e))
    keys = {team: team_key(team) for team in per_team}

    def key(team: str) -> tuple[int, tuple[float, ...], datetime, str]:
        rank, since, job_id = per_team[team][0][0]
        return (rank, keys[team], since, job_id)

    while per_team:
        best = min(per_team, key=key)
        head = per_team[best].popleft()[1]
        if not per_team[best]:
            del per_team[best]
        yield head
        if best in per_team:
            keys[best] = team_key(best)
