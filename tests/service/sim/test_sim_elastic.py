"""Elastic jobs in the simulator (issue 30, item 2): the policy's resizes
(``policy.elastic.decide``) played on a virtual clock."""

from __future__ import annotations

import statistics

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate
from service.sim.trace import data_parallel, generate_contended

NODE = [{"gpus": 4, "cpus": 32}]


def _job(id: str, team: str, at: float, workers: int, work: float, **kw: object) -> SimJob:
    return SimJob(
        id=id,
        team=team,
        submit_s=at,
        num_workers=workers,
        gpus_per_worker=1.0,
        cpus_per_worker=1.0,
        duration_s=work,
        **kw,  # type: ignore[arg-type]
    )


def test_starts_at_min_grows_when_free_shrinks_instead_of_preemption() -> None:
    jobs = [
        _job("rigid", "a", 0.0, 2, 1000.0),
        _job("elastic", "b", 10.0, 4, 3000.0, min_workers=2),  # 3000 s of work at 4 workers
        _job("urgent", "a", 2000.0, 2, 500.0, priority="high"),
    ]
    teams = {"a": SimTeam(), "b": SimTeam()}
    out = {j["id"]: j for j in simulate(nodes=NODE, teams=teams, jobs=jobs)["jobs"]}
    e = out["elastic"]
    # Starts on 2 while the rigid job holds the other 2; grows to 4 when it ends; shrinks
    # to 2 (no preemption) for the high-priority job, which starts at once; grows back.
    assert e["runs"][0][0] == 10.0
    assert [(at, to, kind) for at, to, kind in e["resizes"]] == [
        (1000.0, 4, "grow"),
        (2000.0, 2, "shrink"),
        (2500.0, 4, "grow"),
    ]
    assert e["preemptions"] == 0
    assert out["urgent"]["runs"] == [[2000.0, 2500.0]]
    # Work is kept across resizes: 990 s at half speed, 1000 s at full, 500 s at half,
    # then the 1255 s left at full.
    assert e["runs"][-1][1] == 2500.0 + 1255.0


def test_quiet_ticks_skipped_decide_alike_with_elastic_jobs() -> None:
    lines = data_parallel(
        generate_contended(weights={"a": 1.0, "b": 2.0}, hours=2.0, seed=5, cluster_gpus=16),
        elastic=True,
    )
    jobs = [SimJob(**x) for x in lines]
    teams = {"a": SimTeam(weight=1.0), "b": SimTeam(weight=2.0)}
    nodes = [{"gpus": 8, "cpus": 64}] * 2
    runs = [
        [
            (j["id"], j["runs"], j.get("resizes"))
            for j in simulate(
                nodes=nodes, teams=teams, jobs=jobs, cfg=SimConfig(eta=False, skip_quiet_ticks=s)
            )["jobs"]
        ]
        for s in (True, False)
    ]
    assert runs[0] == runs[1]
    assert any(r for _, _, r in runs[0])  # some job did resize


def test_elastic_jobs_wait_less_at_no_loss_of_utilisation() -> None:
    """The bar on a contended trace (``bench/elastic.py`` prints more): the median wait
    elastic <= 0.7 x rigid, utilisation >= rigid's."""
    weights = {"a": 1.0, "b": 2.0, "c": 1.0}
    lines = generate_contended(weights=weights, hours=6.0, seed=2, cluster_gpus=32)
    teams = {t: SimTeam(weight=w) for t, w in weights.items()}
    nodes = [{"gpus": 8, "cpus": 64}] * 4
    got = {}
    for elastic in (False, True):
        jobs = [SimJob(**x) for x in data_parallel(lines, elastic=elastic)]
        r = simulate(nodes=nodes, teams=teams, jobs=jobs, cfg=SimConfig(eta=False))
        waits = [j["runs"][0][0] - j["submit_s"] for j in r["jobs"]]
        got[elastic] = (r["summary"]["utilisation"], statistics.median(waits))
    assert got[True][1] <= 0.7 * got[False][1], got
    assert got[True][0] >= got[False][0], got
