"""policy.fairshare: decayed usage (two forms agree), dominant share, weighted max-min."""

from __future__ import annotations

import functools

import pytest

from service.policy.fairshare import (
    RunInterval,
    decay_step,
    decayed_average,
    dominant_share,
    max_min_fair,
)

H = 3600.0  # half-life


def test_a_constant_holding_averages_to_itself_and_halves_per_half_life() -> None:
    forever = [RunInterval(start_s=-1e9, end_s=None, cpus=4, gpus=2)]
    assert decayed_average(forever, now_s=0, half_life_s=H) == pytest.approx((4, 2))
    ended = [RunInterval(start_s=-1e9, end_s=0, cpus=4, gpus=2)]
    assert decayed_average(ended, now_s=H, half_life_s=H) == pytest.approx((2, 1))
    future = [RunInterval(start_s=10, end_s=20, cpus=4, gpus=2)]
    assert decayed_average(future, now_s=0, half_life_s=H) == (0, 0)


def test_incremental_and_interval_forms_agree() -> None:
    ivs = [
        RunInterval(start_s=0, end_s=1000, cpus=8, gpus=1),
        RunInterval(start_s=500, end_s=4000, cpus=2, gpus=4),
    ]
    steps = [(0, 500, 8, 1), (500, 1000, 10, 5), (1000, 4000, 2, 4), (4000, 9000, 0, 0)]
    cpus = gpus = 0.0
    for a, b, c, g in steps:
        cpus = decay_step(cpus, c, dt_s=b - a, half_life_s=H)
        gpus = decay_step(gpus, g, dt_s=b - a, half_life_s=H)
    assert decayed_average(ivs, now_s=9000, half_life_s=H) == pytest.approx((cpus, gpus))


@pytest.mark.parametrize(
    ("cpus", "gpus", "totals", "share"),
    [
        (8, 1, (64, 8), 0.125),  # GPUs dominate
        (32, 1, (64, 8), 0.5),  # CPUs dominate
        (4, 0, (8, 0), 0.5),  # a cluster without GPUs
        (0, 0, (0, 0), 0.0),
    ],
)
def test_dominant_share(
    cpus: float, gpus: float, totals: tuple[float, float], share: float
) -> None:
    assert dominant_share(cpus, gpus, total_cpus=totals[0], total_gpus=totals[1]) == share


@pytest.mark.parametrize(
    ("demands", "weights", "capacity", "alloc"),
    [
        ({"a": 10, "b": 10}, {"a": 2, "b": 1}, 9, {"a": 6, "b": 3}),
        ({"a": 1, "b": 10}, {"a": 2, "b": 1}, 9, {"a": 1, "b": 8}),  # a's leftover goes to b
        ({"a": 2, "b": 2}, {"a": 1, "b": 1}, 9, {"a": 2, "b": 2}),  # idle capacity stays idle
        ({"a": 0, "b": 5}, {"a": 1, "b": 1}, 4, {"a": 0, "b": 4}),
    ],
)
def test_weighted_max_min(
    demands: dict[str, float], weights: dict[str, float], capacity: float, alloc: dict[str, float]
) -> None:
    assert max_min_fair(demands, weights, capacity) == pytest.approx(alloc)


def test_owed_accrues_fair_minus_held_while_teams_contend_and_lending_costs_nothing() -> None:
    from service.policy.fairshare import advance_owed

    w = {"a": 1.0, "b": 1.0}
    both = {"a", "b"}
    # Half-lives far beyond the steps: the accruals below are exact, without decay.
    step = functools.partial(advance_owed, weights=w, half_life_s=1e12)
    # A holds the whole cluster while both have work waiting: B is owed, A owes, 0.5 a second.
    owed = step({}, held={"a": 1.0}, demand={"a": 1.5, "b": 0.5}, waiting=both, dt_s=10)
    assert owed["a"] == pytest.approx(-5.0) and owed["b"] == pytest.approx(5.0)
    # Nobody else wants it: A holding everything is charged nothing.
    idle = step(owed, held={"a": 1.0}, demand={"a": 1.5}, waiting={"a"}, dt_s=100)
    assert idle == pytest.approx(owed)
    # A's demand is met in full (nothing of A's waits): not contended, nothing accrues.
    met = step(owed, held={"a": 1.0}, demand={"a": 1.0, "b": 0.5}, waiting={"b"}, dt_s=100)
    assert met == pytest.approx(owed)
    # Weights split what is contended: 3:1, both wanting everything, B holding it all.
    o = step(
        {},
        held={"b": 1.0},
        demand={"a": 1.0, "b": 1.0},
        waiting=both,
        dt_s=4,
        weights={"a": 3.0, "b": 1.0},
    )
    assert o["a"] == pytest.approx(3.0) and o["b"] == pytest.approx(-3.0)
    # With nothing held or wanted the account decays by half per half-life.
    half = advance_owed(
        {"a": 8.0}, held={}, demand={}, waiting=(), weights=w, dt_s=60, half_life_s=60
    )
    assert half["a"] == pytest.approx(4.0)
