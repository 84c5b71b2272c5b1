"""The expected arrivals' cut (issue 30, replay cost): a team's stream ends once its next
arrival, of every class it submits, lands past the last job asked for (its fair key only
grows, so every later one would too, and each would be left out). The estimates are those
of the uncut stream."""

from __future__ import annotations

import pytest

from service.policy.eta import EtaModel, estimate_ranges
from service.policy.eta_arrivals import Arrivals
from service.policy.planner import plan
from service.policy.snapshot import Snapshot
from tests.service.scheduler.policy_helpers import job, running, snapshot

H = 3600.0


def _snap() -> Snapshot:
    """One 1-GPU node held by team b (which submitted lately) to +30 min; team a's 4
    one-hour jobs queued: b's first arrival lands behind a2, its second behind a3."""
    queue = [job(f"a{i}", gpus=1, t=-10 * H + i, max_runtime_s=H) for i in range(1, 5)]
    b0 = job("b0", team="b", gpus=1, t=-0.5 * H, max_runtime_s=H)
    return snapshot(
        now=0, nodes=[(1, 1)], queued=queue, active=[running(b0, started=-0.5 * H, end=0.5 * H)]
    )


def _arrivals(want: list[str] | None) -> Arrivals:
    snap, m = _snap(), EtaModel()
    assert m.arrival_window_s is not None
    got = Arrivals.of(
        snap,
        plan(snap).in_order(),
        window_s=m.arrival_window_s,
        fade_s=m.arrival_fade_s,
        want=want,
    )
    assert got is not None
    return got


def test_a_stream_landing_past_the_last_job_asked_for_ends_at_once() -> None:
    assert _arrivals(["a2"]).next_at() is None  # b's first lands behind a2: none due
    assert _arrivals(["a4"]).next_at() is not None
    assert _arrivals(None).next_at() is not None  # the whole queue: never cut


@pytest.mark.parametrize("want", [["a1"], ["a2"], ["a3"], ["a4"], ["a2", "a3"], None])
def test_the_cut_changes_no_estimate(
    want: list[str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    cut = estimate_ranges(_snap(), want=want)
    monkeypatch.setattr(Arrivals, "_past_last", lambda self, team: False)
    assert estimate_ranges(_snap(), want=want) == cut
