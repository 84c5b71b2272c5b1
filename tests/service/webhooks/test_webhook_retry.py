"""Retry schedule and disable decisions (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from service.webhooks.retry import RETRY_DELAYS_S, classify, next_delay, should_disable


def test_schedule_starts_as_standard_webhooks_and_covers_72_hours() -> None:
    assert RETRY_DELAYS_S[:7] == (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
    assert sum(RETRY_DELAYS_S) >= 72 * 3600
    assert sum(RETRY_DELAYS_S[:-1]) < 72 * 3600  # and stops soon after


@pytest.mark.parametrize(
    ("failed", "delay"),
    [(0, 0.0), (1, 5.0), (2, 300.0), (3, 1800.0), (5, 18000.0), (12, 36000.0), (13, None)],
)
def test_next_delay(failed: int, delay: float | None) -> None:
    assert next_delay(failed) == delay


def test_next_delay_custom_schedule() -> None:
    assert next_delay(1, (0.1, 0.2)) == 0.1
    assert next_delay(3, (0.1, 0.2)) is None


@pytest.mark.parametrize(
    ("code", "kind"),
    [(200, "delivered"), (204, "delivered"), (410, "gone"), (301, "retry"), (500, "retry"),
     (404, "retry"), (None, "retry")],
)  # fmt: skip
def test_classify(code: int | None, kind: str) -> None:
    assert classify(code, "boom").kind == kind


def test_should_disable_needs_count_and_span() -> None:
    now = datetime(2026, 11, 25, tzinfo=UTC)
    day = timedelta(days=1)
    args = {"now": now, "after_failures": 5, "after_s": 86400.0}
    assert not should_disable(failures=4, failing_since=now - 2 * day, **args)  # type: ignore[arg-type]
    assert not should_disable(failures=9, failing_since=now - day / 2, **args)  # type: ignore[arg-type]
    assert not should_disable(failures=9, failing_since=None, **args)  # type: ignore[arg-type]
    assert should_disable(failures=5, failing_since=now - day, **args)  # type: ignore[arg-type]
