"""Which finished jobs are past retention: a pure decision over (id, status, finished_at).

``expired(jobs, now=..., older_than=...)``: ids of terminal jobs that finished at least
``older_than`` before ``now``, oldest first. Unfinished jobs and jobs without a finish time
never expire. ``parse_age("30d")`` reads the CLI's ages (``s``, ``m``, ``h``, ``d``, ``w``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from shunter.jobspec.vocab import TERMINAL_STATUSES

__all__ = ["JobAge", "expired", "parse_age"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGE = re.compile(r"^\s*(\d+)\s*([smhdw])\s*$")


@dataclass(frozen=True)
class JobAge:
    id: str
    status: str
    finished_at: datetime | None


def expired(jobs: Iterable[JobAge], *, now: datetime, older_than: timedelta) -> list[str]:
    cutoff = now - older_than
    old = [
        j
        for j in jobs
        if j.status in TERMINAL_STATUSES and j.finished_at is not None and j.finished_at <= cutoff
    ]
    return [j.id for j in sorted(old, key=lambda j: (j.finished_at, j.id))]


def parse_age(text: str) -> timedelta:
    """``"30d"`` -> 30 days; ``ValueError`` naming the accepted forms otherwise."""
    m = _AGE.match(text)
    if m is None or int(m.group(1)) == 0:
        raise ValueError(f"{text!r} is not an age: use a positive number and a unit, e.g. 30d, 12h")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])
