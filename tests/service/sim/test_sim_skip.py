"""The simulator plans only at ticks where something could change: the same decisions as
planning at every tick, and a second replay gives the same runs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from service.policy.capacity import pack
from service.sim.engine import SimConfig, SimJob, SimTeam, _Sim, simulate
from service.sim.trace import generate, generate_busy, generate_contended

NODES = [{"gpus": 8, "cpus": 64}] * 2


def _runs(r: dict[str, Any]) -> list[tuple[str, Any, int, Any]]:
    return [(j["id"], j["runs"], j["preemptions"], j["estimated_start_s"]) for j in r["jobs"]]


def _traces() -> list[tuple[str, list[SimJob], dict[str, SimTeam]]]:
    busy = generate_busy(weights={"a": 1, "b": 2, "c": 1}, hours=1.0, jobs_per_hour=12, seed=3)
    contended = generate_contended(weights={"a": 1, "b": 3}, hours=2.0, seed=7, cluster_gpus=16)
    philly = generate(teams=["a", "b", "c"], jobs=60, seed=5, mean_interarrival_s=60.0)
    teams = {"a": SimTeam(weight=1), "b": SimTeam(weight=2), "c": SimTeam(max_priority="normal")}
    return [
        (name, [SimJob(**line) for line in lines], teams)
        for name, lines in (("busy", busy), ("contended", contended), ("philly", philly))
    ]


@pytest.mark.parametrize("policy", ["fair", "priority", "fifo"])
def test_skipping_quiet_ticks_changes_no_decision(policy: str) -> None:
    skipped = 0
    for _, jobs, teams in _traces():
        fast = simulate(nodes=NODES, teams=teams, jobs=jobs, cfg=SimConfig(policy=policy))
        slow = simulate(
            nodes=NODES,
            teams=teams,
            jobs=jobs,
            cfg=SimConfig(policy=policy, skip_quiet_ticks=False),
        )
        assert _runs(fast) == _runs(slow)
        assert slow["summary"]["decision_s"]["skipped_ticks"] == 0
        skipped += fast["summary"]["decision_s"]["skipped_ticks"]
        ticks = fast["summary"]["decision_s"]["ticks"]
        assert (
            ticks + fast["summary"]["decision_s"]["skipped_ticks"]
            == (slow["summary"]["decision_s"]["ticks"])
        )
    assert skipped > 0  # the test would prove nothing if no tick were ever skipped


def test_a_second_replay_is_identical() -> None:
    _, jobs, teams = _traces()[0]
    first = simulate(nodes=NODES, teams=teams, jobs=jobs)
    second = simulate(nodes=NODES, teams=teams, jobs=jobs)
    assert _runs(first) == _runs(second)
    d = first["summary"]["decision_s"]
    assert d["ticks"] > 0 and 0 <= d["p50"] <= d["p99"] <= d["max"]


def test_the_kept_packing_is_the_packing_afresh() -> None:
    """The simulator keeps its packing of the running jobs across starts and stops (a start
    packs one more, a stop re-packs those after it): at every tick it is what packing every
    running job again, in start order, gives."""
    _, jobs, teams = _traces()[0]
    checked = 0

    class Checked(_Sim):
        def _tick(self, new: Sequence[str]) -> None:
            nonlocal checked
            kept = self._packing()
            free, placements = pack(self.totals, [self.state[i].job for i in self.running])
            assert (kept, self._placements) == (free, placements)
            checked += 1
            super()._tick(new)

    sim = Checked(NODES, teams, jobs, SimConfig())
    sim.run()
    assert (
        checked > 50
        and sim.result()["jobs"] == simulate(nodes=NODES, teams=teams, jobs=jobs)["jobs"]
    )
