"""Retry and disable decisions (pure): what happens after one delivery attempt.

The retry schedule is Standard Webhooks' (immediately, 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
10 h) continued with 10 h steps until it covers 72 h: 13 attempts over 77 h 35 min. A 410
answer disables the endpoint at once; an endpoint whose consecutive failures reach
``disable_after_failures`` and span at least ``disable_after_s`` is disabled too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

__all__ = [
    "RETRY_DELAYS_S",
    "Outcome",
    "classify",
    "next_delay",
    "should_disable",
]

_H = 3600.0
# Delay before retry n (after n failed attempts), in seconds.
RETRY_DELAYS_S: tuple[float, ...] = (5.0, 300.0, 1800.0, 2 * _H, 5 * _H) + (10 * _H,) * 7


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """What one attempt means: ``delivered``, ``gone`` (410) or ``retry``."""

    kind: str
    detail: str


def next_delay(failed_attempts: int, delays: Sequence[float] = RETRY_DELAYS_S) -> float | None:
    """Seconds until the next try after ``failed_attempts`` failures; None = give up."""
    if failed_attempts < 1:
        return 0.0
    if failed_attempts > len(delays):
        return None
    return delays[failed_attempts - 1]


def classify(status_code: int | None, error: str | None) -> Outcome:
    """2xx is delivered, 410 disables the endpoint, anything else (3xx too: no redirects
    are followed) or no answer is retried."""
    if status_code is not None and 200 <= status_code < 300:
        return Outcome(kind="delivered", detail=f"HTTP {status_code}")
    if status_code == 410:
        return Outcome(kind="gone", detail="the endpoint answered 410 Gone")
    if status_code is not None:
        return Outcome(kind="retry", detail=f"HTTP {status_code}")
    return Outcome(kind="retry", detail=error or "no answer")


def should_disable(
    *,
    failures: int,
    failing_since: datetime | None,
    now: datetime,
    after_failures: int,
    after_s: float,
) -> bool:
    """Consecutive failures enough in number and spread over long enough."""
    if failing_since is None or failures < after_failures:
        return False
    return now - failing_since >= timedelta(seconds=after_s)
