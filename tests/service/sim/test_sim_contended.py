"""The issue's fairness bars on generated contended traces (``trace.generate_contended``):
2-4 teams of unequal weights, 1-4 GPU jobs among whole-node jobs and 2-node gangs, every team
with work queued for hours. On each: every team's GPU-seconds within 10% of its weighted
max-min fair share over contended time, utilisation >= 95% of FIFO's, and every gang started
within a bound (and sooner than FIFO starts its last one)."""

from __future__ import annotations

from typing import Any

import pytest

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate
from service.sim.trace import generate_contended

# (weights, seed, 8-GPU nodes); 6 hours of submissions each. Traces 0, 1, 6, 7 and 9 of
# ``bench/scheduler_contended.py``; 1 and 9 are the ones where a team's share (6.4 and 4
# GPUs) is smaller than its whole-node jobs and 2-node gangs (worst share errors 0.13 and
# 0.28 with the former usage-history key, 0.02 and 0.06 with the owed account). Figures over
# 24 traces in docs/scheduling.md.
CASES = [
    ({"a": 1.0, "b": 1.0, "c": 2.0, "d": 1.0}, 42000, 4),
    ({"a": 1.0, "b": 4.0}, 42001, 4),
    ({"a": 1.0, "b": 1.0, "c": 2.0}, 42006, 4),
    ({"a": 3.0, "b": 1.0}, 42007, 5),
    ({"a": 4.0, "b": 1.0, "c": 3.0}, 42009, 4),
]


def _gang_waits(result: dict[str, Any], gangs: set[str]) -> list[float]:
    return [j["runs"][0][0] - j["submit_s"] for j in result["jobs"] if j["id"] in gangs]


@pytest.mark.slow
@pytest.mark.parametrize(("weights", "seed", "nodes"), CASES)
def test_each_team_within_ten_percent_of_its_fair_share(
    weights: dict[str, float], seed: int, nodes: int
) -> None:
    lines = generate_contended(weights=weights, hours=6.0, seed=seed, cluster_gpus=8 * nodes)
    jobs = [SimJob(**line) for line in lines]
    gangs = {j.id for j in jobs if j.num_workers > 1}
    teams = {t: SimTeam(weight=w) for t, w in weights.items()}
    cluster = [{"gpus": 8, "cpus": 64}] * nodes

    def run(policy: str) -> dict[str, Any]:
        cfg = SimConfig(policy=policy, eta=False)
        return simulate(nodes=cluster, teams=teams, jobs=jobs, cfg=cfg)

    fair, fifo = run("fair"), run("fifo")
    f, o = fair["summary"], fifo["summary"]
    assert f["contended_s"] >= 3 * 3600, f["contended_s"]  # hours of all teams contending
    errors = {t: row["share_error"] for t, row in f["teams"].items()}
    assert all(e is not None and e <= 0.10 for e in errors.values()), errors
    assert f["utilisation"] >= 0.95 * o["utilisation"], (f["utilisation"], o["utilisation"])
    assert f["never_started"] == 0
    assert gangs
    waits, fifo_waits = _gang_waits(fair, gangs), _gang_waits(fifo, gangs)
    assert max(waits) <= 3 * 3600, max(waits)
    assert max(waits) < max(fifo_waits), (max(waits), max(fifo_waits))
