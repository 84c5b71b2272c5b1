"""Issue 30's ETAs: the calibration earns its place online (``EtaModel.shrink``). The
estimate takes the power of the calibration's scale (1, 3/4, 1/2, 1/4 or 0) whose median
relative error over the recently started jobs' first estimates was lowest; the p90 keeps
all of it. Live (``WaitHistory``) and in the simulator the checks are (actual ÷ predicted
wait, the scale the calibration gave then) of jobs that waited at least 10 min."""

from __future__ import annotations

from datetime import timedelta

from service.policy.eta import EtaModel, WaitHistory, estimate_ranges
from tests.service.scheduler.policy_helpers import at, running, snapshot
from tests.service.sim.test_eta_ranges import _one_node_busy

H = 3600.0
SEEN = {("a", "normal"): [0.5] * 20}  # the calibration: predicted waits x 0.5


def test_a_calibration_that_hurt_lately_is_dropped_from_the_estimate_not_the_p90() -> None:
    """The last 30 started jobs were given x 0.5 and waited as the forward run said (ratio
    1): the calibration doubled their error, so the estimate is the forward run's."""
    snap, _ = _one_node_busy()
    calibrated = estimate_ranges(snap, model=EtaModel(wait_ratios=SEEN))["gang"]
    assert (calibrated.start, calibrated.scale) == (at(0.5 * H), 0.5)
    hurt = EtaModel(wait_ratios=SEEN, checks=[(1.0, 0.5)] * 30)
    assert hurt.shrink == 0.0
    got = estimate_ranges(snap, model=hurt)["gang"]
    assert got.predicted == got.start == at(H)
    assert got.scale == 0.5  # what the next choice learns from: the scale, taken or not
    assert got.p90 == calibrated.p90  # the range keeps the calibration


def test_a_calibration_that_helped_is_kept_and_one_half_right_is_taken_in_part() -> None:
    snap, _ = _one_node_busy()
    helped = EtaModel(wait_ratios=SEEN, checks=[(0.5, 0.5)] * 30)
    assert helped.shrink == 1.0
    assert estimate_ranges(snap, model=helped)["gang"].start == at(0.5 * H)
    # The jobs waited 0.5 ** 0.5 of the prediction: half the calibration (in log) was right.
    half = EtaModel(wait_ratios=SEEN, checks=[(0.5**0.5, 0.5)] * 30)
    assert half.shrink == 0.5
    got = estimate_ranges(snap, model=half)["gang"].start
    assert abs(got - at(0.5**0.5 * H)) < timedelta(seconds=1)


def test_too_few_checks_or_a_tie_keep_the_whole_calibration() -> None:
    assert EtaModel(wait_ratios=SEEN, checks=[(1.0, 0.5)] * 19).shrink == 1.0
    assert EtaModel(wait_ratios=SEEN, checks=[(1.0, 1.0)] * 30).shrink == 1.0  # no scale
    # The median decides: 11 of 21 helped by the whole scale, 10 hurt.
    mixed = [(0.5, 0.5)] * 11 + [(1.0, 0.5)] * 10
    assert EtaModel(checks=mixed).shrink == 1.0
    assert EtaModel(checks=[(0.5, 0.5)] * 10 + [(1.0, 0.5)] * 11).shrink == 0.0


def test_wait_history_keeps_the_scale_given_and_checks_only_waits_of_10_min() -> None:
    snap, queue = _one_node_busy()
    hist = WaitHistory()
    hist.observe(snap)
    hist.estimated(snap, estimate_ranges(snap, model=EtaModel(wait_ratios=SEEN)))
    # The gang (predicted +1 h, given x 0.5) starts at +2 h; "long" (predicted +3 h) waits.
    later = snapshot(
        now=2 * H, nodes=[(8, 8)], queued=queue[2:], active=[running(queue[0], started=2 * H)]
    )
    hist.observe(later)
    assert hist.checks == [(2.0, 0.5)]
    # A job predicted an hour away that started 5 min after its estimate: a ratio, no check.
    hist2 = WaitHistory()
    hist2.observe(snap)
    hist2.estimated(snap, estimate_ranges(snap, model=EtaModel(wait_ratios=SEEN)))
    soon = snapshot(
        now=300, nodes=[(8, 8)], queued=queue[2:], active=[running(queue[0], started=300)]
    )
    assert hist2.observe(soon) == {("a", "normal"): (300 / H,)}
    assert hist2.checks == []
