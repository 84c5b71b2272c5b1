"""Issue 30's ETAs (``policy.eta.estimate_ranges``): backfill, expected run times learned
from ended attempts, the calibration of a predicted wait, the live learners, and the
simulator's calibration figures on a small generated day."""

from __future__ import annotations

import pytest

from service.policy.eta import (
    EtaModel,
    RuntimeHistory,
    RuntimeModel,
    WaitHistory,
    estimate_ranges,
    estimate_starts,
)
from service.policy.snapshot import QueueEntry, Snapshot
from service.sim.engine import SimConfig, SimJob, SimTeam, simulate
from service.sim.report import eta_calibration
from service.sim.trace import generate_bursty, generate_busy
from tests.service.scheduler.policy_helpers import at, job, running, snapshot

H = 3600.0


def _one_node_busy() -> tuple[Snapshot, list[QueueEntry]]:
    """One 8-GPU node; a running 6-GPU job ends in an hour by its step rate (its bound,
    max_runtime 10 h, is later); a whole-node job waits first in line."""
    holder = job("r", gpus=6, cpus=6, max_runtime_s=10 * H)
    queue = [
        job("gang", gpus=8, cpus=8, t=1, max_runtime_s=2 * H),
        job("short", gpus=1, cpus=1, t=2, max_runtime_s=0.5 * H),
        job("long", gpus=2, cpus=2, t=3, max_runtime_s=3 * H),
    ]
    snap = snapshot(
        now=0, nodes=[(8, 8)], queued=queue, active=[running(holder, started=-H, end=H)]
    )
    return snap, queue


def test_a_short_job_backfills_before_the_reservation_and_a_long_one_waits_behind_it() -> None:
    snap, _ = _one_node_busy()
    got = estimate_ranges(snap)
    assert got["short"].start == at(0)  # ends (30 min) before the gang's start (1 h)
    assert got["gang"].start == at(H)  # the running job's end by its step rate
    assert got["long"].start == at(3 * H)  # would delay the gang: after it (its bound, 2 h)
    # The forward run before issue 30 placed no job ahead of one before it.
    old = estimate_starts(snap)
    assert old["short"] == at(3 * H)  # behind the gang, held to its 2 h bound


def test_jobs_end_at_their_teams_fraction_of_the_limit_once_history_has_enough() -> None:
    snap, _ = _one_node_busy()
    # Team a's attempts held 25% of their limit: the gang holds the node 30 min, not 2 h.
    model = EtaModel(runtime=RuntimeModel(fractions={"a": [0.25] * 10}))
    got = estimate_ranges(snap, model=model)
    assert got["gang"].start == at(H)
    # "short" now runs 7.5 min; "long" 45 min, so it now ends before the gang's start and
    # backfills once "short" has ended.
    assert got["long"].start == at(0.125 * H)
    # Too little history (< 8 attempts, no other team): held to the limit, as before.
    few = estimate_ranges(snap, model=EtaModel(runtime=RuntimeModel(fractions={"a": [0.25]})))
    assert few["long"].start == at(3 * H)


def test_attempts_still_running_lengthen_the_learned_run_time_as_lower_bounds() -> None:
    """8 attempts ended at 20% of their limit (the short ones, learned first); 8 are still
    running at 90% of theirs: Kaplan-Meier's mean is 0.2 + half surviving x the 0.8 left
    to the limit = 0.6, where the ended ones alone say 0.2 (every queued job ahead would
    be expected to end 3x too soon)."""
    ended = RuntimeModel(fractions={"a": [0.2] * 8})
    assert ended.fraction("a", None) == pytest.approx(0.2)
    long = [running(job(f"r{i}", max_runtime_s=H), started=-0.9 * H) for i in range(8)]
    snap = snapshot(now=0, nodes=[(8, 8)] * 8, queued=[], active=long)
    model = ended.with_running(snap)
    assert model.running == {"a": [pytest.approx(0.9)] * 8}
    assert model.fraction("a", None) == pytest.approx(0.6)
    assert model.fraction("a", 0.9) == pytest.approx(0.9)  # the tail: the largest bound
    # Running attempts shorter than every ended one change nothing.
    short = [running(job(f"s{i}", max_runtime_s=H), started=-0.1 * H) for i in range(8)]
    snap = snapshot(now=0, nodes=[(8, 8)] * 8, queued=[], active=short)
    assert ended.with_running(snap).fraction("a", None) == pytest.approx(0.2)


def test_a_running_job_without_a_step_rate_ends_at_its_fraction_of_its_limit() -> None:
    holder = job("r", gpus=8, cpus=8, max_runtime_s=4 * H)
    # expected_end_at = its bound (no step rate yet): started at -1 h, limit 4 h -> 3 h.
    snap = snapshot(
        now=0,
        nodes=[(8, 8)],
        queued=[job("q", gpus=8, cpus=8, t=1, max_runtime_s=H)],
        active=[running(holder, started=-H, end=3 * H)],
    )
    model = EtaModel(runtime=RuntimeModel(fractions={"a": [0.5] * 8}))
    assert estimate_ranges(snap, model=model)["q"].start == at(H)  # -1 h + 4 h x 0.5
    assert estimate_ranges(snap)["q"].start == at(3 * H)  # no history: its bound


def test_the_calibration_scales_a_predicted_wait_and_the_p90_is_never_earlier() -> None:
    snap, _ = _one_node_busy()
    ratios = {("a", "normal"): [0.5] * 15 + [2.0] * 5}  # median 0.5, p90 2.0
    got = estimate_ranges(snap, model=EtaModel(wait_ratios=ratios))
    assert got["gang"].predicted == at(H)
    assert got["gang"].start == at(0.5 * H)
    assert got["gang"].p90 == at(2 * H)
    assert got["short"].start == got["short"].p90 == at(0)  # starting now stays now
    # Too few ratios: the forward run's estimate; the p90 from the run-time spread.
    plain = estimate_ranges(snap, model=EtaModel(wait_ratios={("a", "normal"): [0.5] * 5}))
    assert plain["gang"].start == at(H) and plain["gang"].p90 >= plain["gang"].start


def test_jobs_still_waiting_widen_the_p90_as_lower_bounds_and_leave_the_estimate() -> None:
    """20 seen ratios of 0.5 (the short waits, learned first) and 30 jobs still waiting at
    3x their predicted wait: Kaplan-Meier puts the 90th percentile at the largest bound
    (fewer than 9 in 10 are known to wait less), not at the seen ones' 0.5 (the p90 would
    be the floor, 1x); the estimate stays the seen ratios' median."""
    snap, _ = _one_node_busy()
    seen = {("a", "normal"): [0.5] * 20}
    alone = estimate_ranges(snap, model=EtaModel(wait_ratios=seen))["gang"]
    assert (alone.start, alone.p90) == (at(0.5 * H), at(H))
    waiting = {("a", "normal"): [3.0] * 30}
    got = estimate_ranges(snap, model=EtaModel(wait_ratios=seen, waiting=waiting))["gang"]
    assert (got.start, got.p90) == (at(0.5 * H), at(3 * H))
    # Bounds below the seen ratios tell nothing more: those jobs left the risk set first.
    low = {("a", "normal"): [0.1] * 20}
    same = estimate_ranges(snap, model=EtaModel(wait_ratios=seen, waiting=low))["gang"]
    assert (same.start, same.p90) == (at(0.5 * H), at(H))


def _one_gpu(*, a_since: float, b_since: float) -> tuple[Snapshot, list[QueueEntry]]:
    """One 1-GPU node held by team b's job to +30 min; team a's 4 one-hour jobs queued.
    ``a_since``/``b_since``: when each team's jobs were submitted (seconds, now = 0)."""
    queue = [job(f"a{i}", gpus=1, t=a_since + i, max_runtime_s=H) for i in range(1, 5)]
    b0 = job("b0", team="b", gpus=1, t=b_since, max_runtime_s=H)
    snap = snapshot(
        now=0, nodes=[(1, 1)], queued=queue, active=[running(b0, started=-0.5 * H, end=0.5 * H)]
    )
    return snap, queue


def test_a_team_that_goes_on_submitting_goes_ahead_of_another_teams_backlog() -> None:
    """Team b submitted one job in the last 2 h: one more is expected each 2 h, fading
    (at +1.04 h, +3.45 h, ...: ``EtaModel.arrival_fade_s``), each where b's next job lands
    in the fair order: b holds the cluster, so behind a's first two jobs, then behind a's
    third."""
    snap, _ = _one_gpu(a_since=-10 * H, b_since=-0.5 * H)
    got = estimate_ranges(snap)
    assert [got[f"a{i}"].start for i in range(1, 5)] == [
        at(0.5 * H),
        at(1.5 * H),
        at(3.5 * H),
        at(5.5 * H),
    ]
    plain = estimate_ranges(snap, model=EtaModel(arrival_window_s=None))  # the queue of now
    assert [plain[f"a{i}"].start for i in range(1, 5)] == [at((i - 0.5) * H) for i in range(1, 5)]


def test_a_submit_stream_fades_so_a_short_fade_expects_fewer_arrivals() -> None:
    snap, _ = _one_gpu(a_since=-10 * H, b_since=-0.5 * H)
    got = estimate_ranges(snap, model=EtaModel(arrival_fade_s=2 * H))  # one arrival: +1.4 h
    assert [got[f"a{i}"].start for i in range(1, 5)] == [
        at(0.5 * H),
        at(1.5 * H),
        at(3.5 * H),
        at(4.5 * H),
    ]


def test_a_teams_own_arrivals_never_delay_its_queued_jobs() -> None:
    snap, _ = _one_gpu(a_since=-H, b_since=-10 * H)  # only team a submitted lately
    got = estimate_ranges(snap)
    assert [got[f"a{i}"].start for i in range(1, 5)] == [at((i - 0.5) * H) for i in range(1, 5)]


def test_a_queue_that_only_drains_is_not_scaled_by_ratios_learned_while_jobs_arrived() -> None:
    """Nothing submitted within the window: the forward run sees all that decides the
    starts, so the estimate is its prediction; with arrivals off, the ratios scale it."""
    snap, _ = _one_gpu(a_since=-10 * H, b_since=-10 * H)
    ratios = {("a", "normal"): [2.0] * 20}
    got = estimate_ranges(snap, model=EtaModel(wait_ratios=ratios))
    assert got["a4"].start == got["a4"].predicted == at(3.5 * H)
    off = estimate_ranges(snap, model=EtaModel(wait_ratios=ratios, arrival_window_s=None))
    assert off["a4"].start == at(7 * H)


def test_runtime_history_learns_attempt_lengths_from_the_snapshots() -> None:
    hist = RuntimeHistory(keep=3)
    limited = job("x", gpus=1, cpus=1, max_runtime_s=4 * H)
    free = job("y", team="b", gpus=1, cpus=1)
    first = snapshot(
        now=0,
        nodes=[(8, 8)],
        queued=[],
        active=[running(limited, started=-H), running(free, started=-H)],
    )
    hist.observe(first)
    model = hist.observe(snapshot(now=H, nodes=[(8, 8)], queued=[]))  # both gone
    assert model.fractions == {"a": (0.5,)}  # held 2 h of a 4 h limit
    assert model.durations == {"b": (2 * H,)}


def test_wait_history_records_actual_over_predicted_wait_at_the_start() -> None:
    snap, queue = _one_node_busy()
    hist = WaitHistory()
    hist.observe(snap)
    hist.estimated(snap, estimate_ranges(snap))  # the gang predicted at +1 h
    later = snapshot(
        now=2 * H,
        nodes=[(8, 8)],
        queued=queue[2:],
        active=[running(queue[0], started=2 * H)],  # it started at +2 h
    )
    # Half an hour in: the gang half its predicted hour, "long" a sixth of its 3 h.
    assert hist.waiting(at(0.5 * H)) == {("a", "normal"): [0.5, 0.5 / 3]}
    ratios = hist.observe(later)
    assert ratios == {("a", "normal"): (2.0,)}  # "short" (predicted now) is not counted
    # The gang started: a ratio now, no longer a bound; "long" waits on.
    assert hist.waiting(at(2 * H)) == {("a", "normal"): [2 / 3]}


def test_the_report_counts_long_waits_only_and_the_p90_coverage() -> None:
    jobs = [
        {
            "submit_s": 0,
            "runs": [[1000, 2000]],
            "estimated_start_s": 1500,
            "estimated_start_p90_s": 2000,
        },
        {
            "submit_s": 0,
            "runs": [[2000, 3000]],
            "estimated_start_s": 1000,
            "estimated_start_p90_s": 1500,
        },
        {
            "submit_s": 0,
            "runs": [[100, 200]],
            "estimated_start_s": 5000,
            "estimated_start_p90_s": 9000,
        },
    ]
    c = eta_calibration(jobs)
    assert c["jobs"] == 2  # the 100 s wait is left out
    assert c["median_rel_error"] == 0.5 and c["p90_rel_error"] == 0.5
    assert c["p90_coverage"] == 0.5


@pytest.mark.parametrize("kind", ["busy", "bursty"])
def test_etas_on_a_small_contended_day_beat_the_old_forward_run(kind: str) -> None:
    """6 h of each generated shape (deterministic): the new ETAs' median relative error is
    well below the old forward run's; on the busy shape the p90 range covers >= 80%."""
    if kind == "busy":
        weights = {"a": 1.0, "b": 2.0, "c": 1.0}
        lines = generate_busy(weights=weights, hours=6, seed=3)
    else:
        weights = {"a": 1.0, "b": 1.0, "c": 2.0, "d": 3.0}
        lines = generate_bursty(weights=weights, hours=6, jobs=700, seed=3)
    jobs = [SimJob(**line) for line in lines]
    teams = {t: SimTeam(weight=w) for t, w in weights.items()}
    nodes = [{"gpus": 8, "cpus": 64}] * 4
    new = simulate(nodes=nodes, teams=teams, jobs=jobs, cfg=SimConfig())["summary"]["eta"]
    old = simulate(nodes=nodes, teams=teams, jobs=jobs, cfg=SimConfig(eta_legacy=True))
    before = old["summary"]["eta"]
    print(kind, "now", new, "before", before)
    assert new["jobs"] > 100
    assert new["median_rel_error"] < 0.5 * before["median_rel_error"]
    if kind == "busy":  # the shape the calibration holds on (the other: docs/scheduling.md)
        assert new["p90_coverage"] >= 0.8
