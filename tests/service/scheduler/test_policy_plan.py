"""policy.planner: fair-share order, EASY reservations, preemption choices. Tables of cases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from service.policy.planner import PolicyConfig, plan
from service.policy.snapshot import TeamQuota, TeamState
from tests.service.scheduler.policy_helpers import job, running, snapshot


def started(p) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.entry.job_id for d in p.starts]


def order(p) -> list[str]:  # type: ignore[no-untyped-def]
    return [d.entry.job_id for d in p.decisions]


def test_fair_share_interleaves_teams_with_equal_weight() -> None:
    queued = [job(f"a{i}", team="a", t=i) for i in range(4)]
    queued += [job(f"b{i}", team="b", t=10 + i) for i in range(4)]
    # A already holds one of the two CPUs: B's first job goes before A's next one.
    snap = snapshot(now=20, nodes=[(2, 0)], queued=queued, active=[running(job("a-old", team="a"))])
    p = plan(snap)
    assert started(p) == ["b0"]
    assert order(p)[:4] == ["b0", "a0", "b1", "a1"]
    fifo = plan(snap, PolicyConfig.named("fifo"))
    assert started(fifo) == ["a0"]


@pytest.mark.parametrize(
    ("weights", "expect"),
    [
        ({"a": 1.0, "b": 1.0}, ["a0", "b0", "a1", "b1"]),
        # a's key rises by 1/4 / 3 per job, b's by 1/4: a gets three of the first four.
        ({"a": 3.0, "b": 1.0}, ["a0", "b0", "a1", "a2"]),
    ],
)
def test_weight_scales_the_share(weights: dict[str, float], expect: list[str]) -> None:
    queued = [job(f"a{i}", team="a", t=i) for i in range(4)] + [
        job(f"b{i}", team="b", t=i + 0.5) for i in range(4)
    ]
    teams = {t: TeamState(weight=w) for t, w in weights.items()}
    p = plan(snapshot(now=10, nodes=[(4, 0)], queued=queued, teams=teams))
    assert order(p)[:4] == expect
    assert started(p) == expect
    assert len(p.starts) == 4


def test_history_puts_a_team_that_ran_lately_behind() -> None:
    queued = [job("a0", team="a", t=0), job("b0", team="b", t=5)]
    teams = {"a": TeamState(history_share=0.5), "b": TeamState(history_share=0.0)}
    p = plan(snapshot(now=10, nodes=[(1, 0)], queued=queued, teams=teams))
    assert started(p) == ["b0"]


def test_priority_class_beats_fair_share() -> None:
    queued = [job("a-high", team="a", priority="high", t=5), job("b0", team="b", t=0)]
    active = [running(job("a-old", team="a"))]
    p = plan(snapshot(now=10, nodes=[(2, 0)], queued=queued, active=active))
    assert started(p) == ["a-high"]


def test_quota_caps_a_team_and_idle_capacity_is_lent() -> None:
    teams = {"a": TeamState(quota=TeamQuota(max_cpus=2))}
    queued = [job(f"a{i}", team="a", t=i) for i in range(4)]
    p = plan(snapshot(now=10, nodes=[(8, 0)], queued=queued, teams=teams))
    assert started(p) == ["a0", "a1"]
    assert "team quota" in (p.decisions[2].reason or "")
    # Without a quota, a lone team takes the whole idle cluster.
    assert len(plan(snapshot(now=10, nodes=[(8, 0)], queued=queued)).starts) == 4


# -- reservations (EASY backfill) -------------------------------------------------------


def _gang_case(small_runtime: float | None, *, preemptible: bool = False) -> list[str]:
    # 4 CPUs; 2 held until t=100 and 1 more until t=50. A 4-CPU gang heads the queue.
    active = [
        running(job("r1", t=-5, workers=2), end=100),
        running(job("r2", t=-4), end=50),
    ]
    small = job("small", t=1, max_runtime_s=small_runtime, preemptible=preemptible)
    queued = [job("gang", workers=4, t=0), small]
    p = plan(snapshot(now=10, nodes=[(4, 0)], queued=queued, active=active))
    assert p.reservation is not None and p.reservation.entry.job_id == "gang"
    return started(p)


@pytest.mark.parametrize(
    ("small_runtime", "backfills"),
    [
        (30.0, True),  # ends at 40, before the gang's reservation at 100
        (500.0, False),  # would still hold a CPU at 100: delays the gang
        (None, False),  # no bound: may run past 100
    ],
)
def test_backfill_only_when_it_does_not_delay_the_reservation(
    small_runtime: float | None, backfills: bool
) -> None:
    assert ("small" in _gang_case(small_runtime)) is backfills


@pytest.mark.parametrize(("preemptible", "borrows"), [(True, True), (False, False)])
def test_a_preemptible_job_borrows_reserved_capacity(preemptible: bool, borrows: bool) -> None:
    # The gang's reservation starts at t=1000 (r1 ends); "small" has no bound.
    active = [running(job("r1", t=-5, workers=2), end=1000), running(job("r2", t=-4), end=50)]
    small = job("small", t=1, preemptible=preemptible)
    queued = [job("gang", workers=4, t=0), small]
    p = plan(snapshot(now=10, nodes=[(4, 0)], queued=queued, active=active))
    assert ("small" in started(p)) is borrows
    # Within the minimum runtime (300 s) of the reserved start, nothing borrows.
    late = plan(snapshot(now=800, nodes=[(4, 0)], queued=queued, active=active))
    assert started(late) == []


def _reclaim_case(**small: object) -> list[tuple[str, str]]:
    # 4 CPUs. The gang queued at t=0; r1 (2 CPUs) ran before it and ended at t=400; two
    # borrowers started while it waited. At t=400 the gang needs one of them back.
    active = [
        running(job("b1", team="b", t=1, **small), started=5),  # type: ignore[arg-type]
        running(job("b2", team="b", t=2, **small), started=20),  # type: ignore[arg-type]
    ]
    queued = [job("gang", workers=3, t=0)]
    p = plan(snapshot(now=400, nodes=[(4, 0)], queued=queued, active=active))
    return [(v.victim.job_id, v.cause) for v in p.preemptions]


def test_reserved_start_takes_back_only_what_the_gang_needs_youngest_first() -> None:
    assert _reclaim_case() == [("b2", "reservation")]


@pytest.mark.parametrize(
    "small", [{"preemptible": False}, {"priority": "high"}], ids=["not-preemptible", "higher"]
)
def test_reservation_never_takes_back_from_protected_jobs(small: dict[str, object]) -> None:
    assert _reclaim_case(**small) == []


def test_reservation_never_takes_back_what_ran_before_it_queued() -> None:
    # b1 started before the gang (re)queued at t=50: it did not go ahead of it; no victims
    # (b1 also ran under the fair-share minimum runtime rules, which do not apply here).
    active = [running(job("b1", team="b"), started=40), running(job("b2", team="b"), started=45)]
    queued = [job("gang", workers=3, t=50)]
    p = plan(snapshot(now=100, nodes=[(4, 0)], queued=queued, active=active))
    assert [v.cause for v in p.preemptions if v.cause == "reservation"] == []


def test_no_borrowing_once_the_reserved_start_has_come() -> None:
    # b1 stops for the gang now; a preemptible job behind the gang must not take its place.
    active = [running(job("b1", team="b", t=1), started=5)]
    queued = [job("gang", workers=4, t=0), job("c1", team="c", t=3)]
    p = plan(snapshot(now=400, nodes=[(4, 0)], queued=queued, active=active))
    assert [(v.victim.job_id, v.cause) for v in p.preemptions] == [("b1", "reservation")]
    assert started(p) == []
    # A borrower that has not run the minimum runtime (300 s) is not taken back yet.
    assert plan(snapshot(now=200, nodes=[(4, 0)], queued=queued, active=active)).preemptions == []


def test_backfill_on_capacity_the_reservation_does_not_need() -> None:
    # 6 CPUs: a 4-CPU gang is reserved at t=100 (r1 ends); r2 (1 CPU) runs on with no end.
    active = [running(job("r1", workers=4), end=100), running(job("r2"))]
    queued = [job("gang", workers=4, t=0), job("small", t=1)]
    p = plan(snapshot(now=10, nodes=[(6, 0)], queued=queued, active=active))
    assert p.reservation is not None and p.reservation.start_at is not None
    assert started(p) == ["small"]  # 6 - 4 (gang) - 1 (r2) leaves one CPU for it


def test_no_reservation_start_when_a_holder_has_no_end_lends_capacity() -> None:
    active = [running(job("r1", workers=3))]  # no ETA, no max_runtime
    queued = [job("gang", workers=4, t=0), job("small", t=1)]
    p = plan(snapshot(now=10, nodes=[(4, 0)], queued=queued, active=active))
    assert p.reservation is not None and p.reservation.start_at is None
    assert started(p) == ["small"]


def test_fifo_has_no_reservations() -> None:
    active = [running(job("r1", workers=2), end=100), running(job("r2"), end=50)]
    queued = [job("gang", workers=4, t=0), job("small", t=1)]
    p = plan(
        snapshot(now=10, nodes=[(4, 0)], queued=queued, active=active), PolicyConfig.named("fifo")
    )
    assert p.reservation is None and started(p) == ["small"]


# -- preemption -------------------------------------------------------------------------

LOW = job("low", team="a", priority="low", workers=2)


@pytest.mark.parametrize(
    ("case", "now", "victim", "queued", "victims"),
    [
        ("higher class preempts", 1000, LOW, job("hi", team="b", priority="high", t=990), ["low"]),
        (
            "same class, no fair-share grace yet",
            1000,
            replace(LOW, priority="normal"),
            job("n", team="b", t=900),
            [],
        ),
        # A higher class does not wait for the minimum run time (no thrash is possible).
        (
            "higher class, young victim",
            100,
            LOW,
            job("hi", team="b", priority="high", t=90),
            ["low"],
        ),
        (
            "not preemptible",
            1000,
            replace(LOW, preemptible=False),
            job("hi", team="b", priority="high", t=990),
            [],
        ),
        (
            "lower class never preempts",
            1000,
            job("h", team="a", priority="high", workers=2),
            job("n", team="b", t=990),
            [],
        ),
    ],
)
def test_preemption_cases(case: str, now: float, victim, queued, victims: list[str]) -> None:  # type: ignore[no-untyped-def]
    snap = snapshot(now=now, nodes=[(2, 0)], queued=[queued], active=[running(victim)])
    p = plan(snap)
    assert [v.victim.job_id for v in p.preemptions] == victims, case


def test_fair_share_preemption_after_grace_from_team_above_its_share() -> None:
    # a holds both CPUs with two jobs; b (below its half) has waited past the grace.
    active = [running(job("a1", team="a"), started=0), running(job("a2", team="a"), started=50)]
    queued = [job("b1", team="b", t=100)]
    early = plan(snapshot(now=600, nodes=[(2, 0)], queued=queued, active=active))
    assert early.preemptions == []  # waited 500 s < 600 s grace
    p = plan(snapshot(now=800, nodes=[(2, 0)], queued=queued, active=active))
    assert [(v.victim.job_id, v.cause) for v in p.preemptions] == [("a2", "fair share")]
    # A fair-share victim must have run the minimum time (300 s) in its attempt.
    young = [running(job("a1", team="a"), started=600), running(job("a2", team="a"), started=650)]
    assert plan(snapshot(now=800, nodes=[(2, 0)], queued=queued, active=young)).preemptions == []
    # The youngest goes (least work lost). Once it is stopping, no second victim.
    stopping = [active[0], running(job("a2", team="a"), started=50, preempting=True)]
    again = plan(snapshot(now=810, nodes=[(2, 0)], queued=queued, active=stopping))
    assert again.preemptions == []


def test_no_preemption_when_victims_cannot_make_room() -> None:
    active = [running(LOW), running(job("other", team="c", priority="high"))]
    queued = [job("hi", team="b", priority="high", workers=3, t=990)]
    p = plan(snapshot(now=1000, nodes=[(3, 0)], queued=queued, active=active))
    assert p.preemptions == []


def test_fifo_never_preempts() -> None:
    queued = [job("hi", team="b", priority="high", t=990)]
    snap = snapshot(now=1000, nodes=[(2, 0)], queued=queued, active=[running(LOW)])
    assert plan(snap, PolicyConfig.named("fifo")).preemptions == []


def test_a_team_owed_share_seconds_goes_first_though_it_holds_more_now() -> None:
    """The owed account outweighs what a team holds now (``fair_key``): B ran over its share
    earlier (it owes), so A's next job goes first although A already holds a CPU."""
    queued = [job("b0", team="b", t=0), job("a1", team="a", t=5)]
    active = [running(job("a0", team="a"))]
    teams = {"a": TeamState(owed_s=2000.0), "b": TeamState(owed_s=-2000.0)}
    p = plan(snapshot(now=10, nodes=[(2, 0)], queued=queued, active=active, teams=teams))
    assert started(p) == ["a1"]
    # Without the account, B (holding nothing) goes first.
    p = plan(snapshot(now=10, nodes=[(2, 0)], queued=queued, active=active))
    assert started(p) == ["b0"]


def test_fair_share_does_not_stop_a_gang_to_run_a_small_job() -> None:
    """Kueue's LessThanOrEqualToFinalShare: a's 4-CPU gang is over a's half, b waited past the
    grace, but stopping it would leave a with less than b (0 vs 1 CPU): no victim. With two
    2-CPU jobs, stopping one leaves a at 2 CPUs >= b's 1: that one goes."""
    queued = [job("b1", team="b", t=100)]
    gang = [running(job("a-gang", team="a", workers=4), started=0)]
    assert plan(snapshot(now=800, nodes=[(4, 0)], queued=queued, active=gang)).preemptions == []
    two = [
        running(job("a1", team="a", cpus=2), started=0),
        running(job("a2", team="a", cpus=2), started=50),
    ]
    p = plan(snapshot(now=800, nodes=[(4, 0)], queued=queued, active=two))
    assert [(v.victim.job_id, v.cause) for v in p.preemptions] == [("a2", "fair share")]


def test_waiting_reasons_are_typed_and_written_for_people_at_the_end() -> None:
    from service.policy.planner import WaitKind

    # One 2-CPU node: `old` holds one CPU until t=100. `gang` (2 CPUs) gets the reservation
    # at 100; `long` (1 CPU, no bound, not preemptible) would delay it; `huge` never fits;
    # `short` (bound 50 s) ends before 100 and backfills.
    queued = [
        job("gang", t=0, cpus=2),
        job("long", t=1, preemptible=False),
        job("huge", t=2, cpus=3),
        job("short", t=3, max_runtime_s=50),
    ]
    active = [running(job("old", team="z"), end=100)]
    p = plan(snapshot(now=10, nodes=[(2, 0)], queued=queued, active=active))
    kinds = {d.entry.job_id: d.wait.kind if d.wait else None for d in p.decisions}
    assert kinds == {
        "gang": WaitKind.RESOURCES,
        "long": WaitKind.BEHIND_RESERVATION,
        "huge": WaitKind.NEVER_FITS,
        "short": None,
    }
    by = {d.entry.job_id: d for d in p.decisions}
    assert by["gang"].wait is not None and by["gang"].wait.reserved
    assert by["gang"].wait.skipped_for == ("short",)
    assert by["gang"].reason == (
        "waiting for resources: needs 1 x (2 CPU, 0 GPU) at once; reserved: expected to start "
        "2026-01-01T00:01:40Z; skipped for now: short, behind it, fits and starts"
    )
    assert (by["long"].reason or "").startswith("waiting for resources: would delay gang")
    assert (by["huge"].reason or "").startswith("cannot fit the cluster")


def test_a_plan_past_its_depth_defers_the_rest_and_the_incomplete_pass_starts_the_same() -> None:
    queued = [job(f"a{i}", team="a", t=i) for i in range(6)]
    queued += [job(f"b{i}", team="b", t=i + 0.5, cpus=2) for i in range(6)]
    snap = snapshot(now=10, nodes=[(3, 0)], queued=queued)
    full = plan(snap)
    short = plan(snap, max_depth=2)
    assert [d.entry.job_id for d in short.decisions] == order(full)[:2]
    assert short.deferred == len(queued) - 2 and full.deferred == 0
    fast = plan(snap, complete=False)
    assert started(fast) == started(full) and fast.reservation == full.reservation
    assert fast.preemptions == full.preemptions and len(fast.decisions) < len(full.decisions)
