"""Fair share per accelerator type in the simulator (issue 30): the engine keeps what each
team holds per type (``sim.tallies``) and the policy orders by the per-type dominant share,
weighted by ``SimConfig.type_weights``; skipping quiet ticks decides as planning at each."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from service.sim.engine import SimConfig, SimJob, simulate
from service.sim.trace import TraceError, load_cluster
from tests.service.sim.test_sim_types import NODES as MIXED_NODES
from tests.service.sim.test_sim_types import _mixed_day

A100, H100 = "a100", "h100"
NODES: list[dict[str, Any]] = [
    {"gpus": 8, "cpus": 64, "accelerator": A100},
    *({"gpus": 8, "cpus": 64, "accelerator": H100} for _ in range(3)),
]


def _job(
    job_id: str, team: str, t: float, workers: int, gpus: float, on: str, run: float
) -> SimJob:
    return SimJob(
        id=job_id,
        team=team,
        submit_s=t,
        num_workers=workers,
        gpus_per_worker=gpus,
        cpus_per_worker=1.0,
        duration_s=run,
        max_runtime_s=run + 600,
        accelerators=(on,),
    )


def _starts(cfg: SimConfig, nodes: list[dict[str, Any]] = NODES) -> dict[str, float]:
    """a holds 6 of the 8 A100s, b 12 of the 24 H100s and c 11; then a and b each submit a
    1-GPU H100 job, at the same time, for the one H100 left."""
    jobs = [
        _job("ra", "a", 0, 1, 6, A100, 20000),
        _job("rb", "b", 0, 2, 6, H100, 20000),
        _job("rc", "c", 0, 11, 1, H100, 20000),
        _job("qa", "a", 100, 1, 1, H100, 1000),
        _job("qb", "b", 100, 1, 1, H100, 1000),
    ]
    r = simulate(nodes=nodes, teams={}, jobs=jobs, cfg=cfg)
    return {j["id"]: j["runs"][0][0] for j in r["jobs"]}


def test_the_team_with_the_smaller_per_type_share_goes_first() -> None:
    """Pooled GPU counts put a (6/32) before b (12/32); per type a holds 3/4 of the A100s
    and b 1/2 of the H100s, so b's job takes the free H100 and a's waits for it."""
    s = _starts(SimConfig(eta=False))
    assert s["qb"] < 200 and s["qa"] >= s["qb"] + 1000


def test_type_weights_in_the_simulator() -> None:
    """An H100 weighing 4 A100s: a's 6 A100s count 0.1875, below b's 0.5: a goes first."""
    s = _starts(SimConfig(eta=False, type_weights={H100: 4.0}))
    assert s["qa"] < 200 and s["qb"] >= s["qa"] + 1000


def test_a_cluster_file_gives_each_type_its_weight(tmp_path: Path) -> None:
    """``cluster.json``: a node's ``weight`` is its type's (what ``shunter admin sim``
    reads); the same decisions as ``SimConfig.type_weights``."""
    path = tmp_path / "cluster.json"
    heavy = [{**n, "weight": 4} if n["accelerator"] == H100 else n for n in NODES]
    path.write_text(json.dumps({"nodes": heavy}))
    s = _starts(SimConfig(eta=False), load_cluster(path))
    assert s["qa"] < 200 and s["qb"] >= s["qa"] + 1000
    path.write_text(json.dumps({"nodes": [{"gpus": 8, "cpus": 8, "weight": 2}]}))
    with pytest.raises(TraceError, match="weight is its accelerator type's"):
        load_cluster(path)


def test_skipping_quiet_ticks_decides_as_planning_each_tick_on_a_mixed_day() -> None:
    """The quiet check's fair-share test bounds a queued job's share from below on a mixed
    cluster: the runs are the same with and without skipping."""
    weights = {"h100-80gb": 2.0}
    runs = []
    for skip in (True, False):
        cfg = SimConfig(eta=False, skip_quiet_ticks=skip, type_weights=weights)
        r = simulate(nodes=MIXED_NODES, teams={}, jobs=_mixed_day(3)[:120], cfg=cfg)
        runs.append([(j["id"], j["runs"], j["preemptions"]) for j in r["jobs"]])
    assert runs[0] == runs[1]
