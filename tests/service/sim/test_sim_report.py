"""sim_report's share error on hand-made timelines with answers worked out by hand.

Fair share at each instant: the weighted max-min (water-filling) division of the cluster's
GPUs among the teams with demand; counted only while every team with demand has work
queued (all of them contend).
"""

from __future__ import annotations

from typing import Any

import pytest

from service.sim.report import Interval, summarize

G = 8.0  # cluster GPUs (CPUs ignored: a GPU cluster's shares are in GPUs)


def iv(
    start: float,
    end: float,
    held: dict[str, float],
    demand: dict[str, float],
    waiting: set[str],
) -> Interval:
    return Interval(
        start_s=start,
        end_s=end,
        held={t: (0.0, g) for t, g in held.items()},
        demand={t: (0.0, g) for t, g in demand.items()},
        waiting=len(waiting),
        waiting_teams=frozenset(waiting),
    )


def teams_of(intervals: list[Interval], weights: dict[str, float]) -> tuple[dict[str, Any], float]:
    s = summarize([], intervals, weights=weights, total_cpus=64.0, total_gpus=G)
    return s["teams"], s["contended_s"]


def test_water_filling_gives_a_small_demand_its_demand_and_splits_the_rest_by_weight() -> None:
    # a (weight 2) and b (weight 1) want far more than 8 GPUs; c (weight 1) wants 1.
    # Weighted shares would be 4/2/2; c needs 1, so 7 are split 2:1 -> a 14/3, b 7/3, c 1.
    # a holds 5, b 2, c 1 for 100 s: errors |5 - 14/3| / (14/3) = 1/14, |2 - 7/3| / (7/3) = 1/7.
    demand = {"a": 20.0, "b": 20.0, "c": 1.0}
    rows, contended = teams_of(
        [iv(0, 100, {"a": 5, "b": 2, "c": 1}, demand, {"a", "b", "c"})],
        {"a": 2, "b": 1, "c": 1},
    )
    assert contended == 100.0
    assert rows["a"]["fair_contended_s"] == pytest.approx(1400 / 3, abs=0.1)
    assert rows["a"]["share_error"] == pytest.approx(1 / 14, abs=1e-4)
    assert rows["b"]["share_error"] == pytest.approx(1 / 7, abs=1e-4)
    assert rows["c"]["share_error"] == 0.0


def test_only_time_when_every_demanding_team_has_work_queued_counts() -> None:
    weights = {"a": 1.0, "b": 1.0}
    both = iv(0, 100, {"a": 4, "b": 4}, {"a": 10, "b": 10}, {"a", "b"})
    # b's jobs all run (nothing of b waits): b does not contend; not counted, although a waits.
    b_satisfied = iv(100, 300, {"a": 2, "b": 6}, {"a": 10, "b": 6}, {"a"})
    alone = iv(300, 400, {"a": 8}, {"a": 10}, {"a"})  # one team: no contention
    rows, contended = teams_of([both, b_satisfied, alone], weights)
    assert contended == 100.0
    assert rows["a"]["share_error"] == 0.0 and rows["b"]["share_error"] == 0.0
    assert rows["a"]["gpu_s"] == 4 * 100 + 2 * 200 + 8 * 100
    # The same timeline with b also waiting in the middle: a held 2 of its 4 for 200 s.
    b_waits = iv(100, 300, {"a": 2, "b": 6}, {"a": 10, "b": 10}, {"a", "b"})
    rows, contended = teams_of([both, b_waits, alone], weights)
    assert contended == 300.0
    assert rows["a"]["share_error"] == pytest.approx((1200 - 800) / 1200, abs=1e-4)
    assert rows["b"]["share_error"] == pytest.approx((1600 - 1200) / 1200, abs=1e-4)
