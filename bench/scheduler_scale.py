"""The scheduler at cluster scale (issue #19): replay times and the live leader's tick.

1. day: a busy 24 h on 4 nodes x 8 GPUs, teams a:1 b:2 c:1, each ~40 jobs an hour
   (``trace.generate_busy``: mostly 1-GPU jobs, some 2/4-GPU jobs and 8-GPU gangs of 1-2
   nodes, log-normal durations around 30 min); replayed twice (``fair``, ETAs on), the second
   must give identical runs; then once planning at every tick (``skip_quiet_ticks=False``,
   the baseline of the same run) with the same decisions. Target: <= 30 s.
2. big: 500 nodes x 8 GPUs, 50 teams, 20,000 jobs over 24 h. Target: <= 5 min.
3. live: the leader's tick with 10,000 queued and 2,000 running jobs on 500 nodes, on
   PostgreSQL (``--db-url``, default ``$SHUNTER_TEST_POSTGRES_URL``; SQLite when neither):
   p50/p99 of ``Scheduler.tick()`` and the split (sweeps: lease, reap, the sweep of the
   active jobs and the hang watch; snapshot read, plan, starts, ETAs, writes). Target: p99
   <= 200 ms. ``--live-churn N``: before each tick N running jobs report success (as their
   drivers would), so each tick starts jobs in their place: the ticks of a cluster where
   jobs come and go, rather than a full one where nothing changes.

    .venv/bin/python bench/scheduler_scale.py [--hours 24] [--big-nodes 500 --big-teams 50
        --big-jobs 20000] [--live-queued 10000 --live-running 2000 --live-nodes 500]
        [--live-churn 0] [--ticks 20] [--only day,big,live] [--small]

``--small`` runs every part at a tiny size (the smoke test in tests/bench).
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's code, not an installed copy's

from service.sim.engine import SimConfig, SimJob, SimTeam, simulate  # noqa: E402
from service.sim.trace import generate_busy  # noqa: E402


def _runs(r: dict[str, Any]) -> list[Any]:
    return [(j["id"], j["runs"], j["preemptions"], j["estimated_start_s"]) for j in r["jobs"]]


def _replay(nodes: int, weights: dict[str, float], lines: list[dict[str, Any]], **cfg: Any) -> Any:
    jobs = [SimJob(**line) for line in lines]
    teams = {t: SimTeam(weight=w) for t, w in weights.items()}
    t0, c0 = time.perf_counter(), time.process_time()
    r = simulate(
        nodes=[{"gpus": 8, "cpus": 64}] * nodes, teams=teams, jobs=jobs, cfg=SimConfig(**cfg)
    )
    # CPU seconds too: on a shared machine the wall time carries the others' load.
    r["cpu_s"] = time.process_time() - c0
    return r, time.perf_counter() - t0


def _decisions(s: dict[str, Any]) -> str:
    d = s["decision_s"]
    return (
        f"decision per tick p50 {d['p50'] * 1000:.2f} ms, p99 {d['p99'] * 1000:.2f} ms, "
        f"max {d['max'] * 1000:.1f} ms over {d['ticks']} ticks ({d['skipped_ticks']} skipped)"
    )


def day(hours: float, *, baseline: bool) -> None:
    weights = {"a": 1.0, "b": 2.0, "c": 1.0}
    lines = generate_busy(weights=weights, hours=hours, seed=0)
    first, t1 = _replay(4, weights, lines)
    second, t2 = _replay(4, weights, lines)
    same = _runs(first) == _runs(second)
    s = first["summary"]
    print(f"day: {len(lines)} jobs over {hours:g} h on 4 x 8 GPUs, teams a:1 b:2 c:1")
    print(
        f"  replay {t1:.1f} s wall, {first['cpu_s']:.1f} s CPU (target <= 30 s); second replay "
        f"{t2:.1f} s, identical: {same}"
    )
    print(f"  {_decisions(s)}")
    errors = {t: row["share_error"] for t, row in s["teams"].items()}
    print(
        f"  utilisation {s['utilisation']}, share error {errors}, preemptions "
        f"{s['preemptions']}, ETA error median {s['eta_error_s']['median']} s"
    )
    if baseline:
        slow, t3 = _replay(4, weights, lines, skip_quiet_ticks=False)
        print(
            f"  planning every tick: {t3:.1f} s wall, {slow['cpu_s']:.1f} s CPU, "
            f"same decisions: {_runs(slow) == _runs(first)}"
            f" (skipping: {t3 / max(t1, 1e-9):.2f}x faster)"
        )
    assert same, "a second replay differs"


def big(nodes: int, teams: int, jobs: int) -> None:
    weights = {f"t{i:02d}": float(1 + i % 4) for i in range(teams)}
    lines = generate_busy(weights=weights, hours=24.0, jobs_per_hour=jobs / 24.0 / teams, seed=1)
    r, t = _replay(nodes, weights, lines)
    s = r["summary"]
    print(f"big: {len(lines)} jobs, {teams} teams, {nodes} x 8 GPUs over 24 h")
    print(
        f"  replay {t:.1f} s wall, {r['cpu_s']:.1f} s CPU (target <= 300 s); "
        f"utilisation {s['utilisation']}"
    )
    print(f"  {_decisions(s)}")


def _finish(db: Any, launcher: Any, job_ids: list[str]) -> None:
    """Each job's driver reports success on its first attempt (``jobs.attempts``)."""
    from service.jobs.attempts import report_status
    from service.launch import LaunchState, LaunchStatus
    from service.schemas.internal import StatusIn

    for job_id in job_ids:
        db.write(
            lambda s, j=job_id: report_status(
                s, job_id=j, attempt=1, body=StatusIn(status="succeeded"), lease_seconds=60.0
            )
        )
        launcher.states[f"{job_id}-1"] = LaunchStatus(state=LaunchState.SUCCEEDED)


def live(
    url: str | None, *, queued: int, running: int, nodes: int, ticks: int, churn: int = 0
) -> None:
    from service.db.engine import Database
    from service.db.migrate import upgrade
    from service.launch import InMemoryLauncher, LaunchState, LaunchStatus, NodeResources
    from service.scheduler.loop import Scheduler
    from service.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        drop = None
        if url is None:
            url = f"sqlite:///{tmp}/bench.db"
        else:  # a schema of its own, dropped afterwards
            import sqlalchemy as sa

            schema = "bench_" + secrets.token_hex(4)
            admin = sa.create_engine(url)
            with admin.begin() as conn:
                conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
            url = f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
            drop = (admin, schema)
        try:
            upgrade(url)
            db = Database(url)
            kind = "sqlite" if db.is_sqlite else "postgresql"
            launcher = InMemoryLauncher()
            launcher.nodes = [
                NodeResources(
                    node_id=f"n{i:03d}",
                    address="127.0.0.1",
                    alive=True,
                    total_cpus=64,
                    free_cpus=64,
                    total_gpus=8,
                    free_gpus=8,
                )
                for i in range(nodes)
            ]
            _fill(db, launcher, queued=queued, running=running, gpus=8 * nodes)
            # Every filled attempt's driver runs (an unknown one would be lost at the first
            # tick's reconcile, and each tick would then start hundreds of jobs again).
            for sub in list(launcher.submitted):
                launcher.states[sub] = LaunchStatus(state=LaunchState.RUNNING)
            settings = Settings(
                home=Path(tmp) / "home",
                database_url=url,
                data_roots=[Path(tmp)],
                launcher="memory",
                run_scheduler=False,
                migrate_on_start=False,
                # No driver heartbeats here: a lease as long as the filled attempts' keeps
                # the reaper from losing them when a tick runs past the default 30 s.
                lease_seconds=86_400.0,
            )
            sched = Scheduler(settings, db, launcher)
            times, splits, cpu = [], [], []
            changed = 0  # jobs started, found hung or reaped: none while the cluster is full
            ending = [f"job-{i:06d}" for i in range(running)]
            random.Random(1).shuffle(ending)
            for k in range(ticks):
                if churn and k > 0:  # the first tick is the cold one: no churn before it
                    _finish(db, launcher, ending[(k - 1) * churn : k * churn])
                t0, c0 = time.perf_counter(), time.process_time()
                report = sched.tick()
                times.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
                splits.append(dict(sched.stats.last_split))
                assert not report.errors, report.errors
                changed += len(report.started) + len(report.hung) + len(report.reaped)
            cold, warm = times[0], sorted(times[1:]) or [times[0]]
            p99 = warm[min(len(warm) - 1, int(0.99 * len(warm)))]
            print(
                f"live ({kind}): {queued} queued, {running} running, {nodes} nodes, depth "
                f"{settings.scheduler_max_plan_depth}, churn {churn} a tick: first tick "
                f"{cold * 1000:.0f} ms "
                f"(writes every row it reaches); then p50 "
                f"{statistics.median(warm) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms "
                f"(target <= 200 ms) over {len(warm)} ticks; this process's CPU per tick "
                f"p50 {statistics.median(cpu[1:] or cpu) * 1000:.0f} ms"
            )
            parts = splits[1:] or splits
            split = {k: statistics.median(s[k] for s in parts) for k in parts[0]}
            print(
                "  split (median ms): "
                + ", ".join(f"{k} {v * 1000:.0f}" for k, v in split.items())
                + f"; jobs started, hung or reaped over the ticks: {changed}"
            )
            db.dispose()
        finally:
            if drop is not None:
                admin, schema = drop
                with admin.begin() as conn:
                    conn.execute(sa.text(f"DROP SCHEMA {schema} CASCADE"))
                admin.dispose()


def _fill(db: Any, launcher: Any, *, queued: int, running: int, gpus: int) -> None:
    """Teams, ``running`` jobs holding the whole cluster (an active attempt each), and
    ``queued`` jobs of 1-8 GPUs behind them; bulk inserts."""
    from sqlalchemy import insert

    from service.db.tables import ACTIVE, Attempt, Job, Team
    from service.launch import LaunchRequest

    rng = random.Random(0)
    now = datetime.now(UTC)
    teams = [f"t{i:02d}" for i in range(20)]
    per_running = max(gpus // max(running, 1), 1)

    def job(i: int, status: str, g: int) -> dict[str, Any]:
        team = teams[i % len(teams)]
        return {
            "id": f"job-{i:06d}",
            "team": team,
            "name": f"j{i}",
            "status": status,
            "priority": "normal",
            # Long startup bound: no driver reports steps here, and the hang watch must not
            # end the filled running jobs (a tick would then start others in their place).
            "spec": {
                "max_runtime_seconds": 3600 * rng.randint(1, 8),
                "health": {"hang": {"startup_s": 86_400}},
            },
            "created_by": None,
            "created_at": now - timedelta(seconds=queued + running - i),
            "updated_at": now,
            "attempt": 1 if status == "running" else 0,
            "num_workers": 1,
            "cpus_per_worker": 8.0 * g,
            "gpus_per_worker": float(g),
        }

    rows = [job(i, "running", per_running) for i in range(running)]
    rows += [job(running + i, "queued", rng.choice([1, 1, 1, 2, 4, 8])) for i in range(queued)]
    attempts = [
        {
            "job_id": r["id"],
            "number": 1,
            "status": ACTIVE,
            "token_hash": secrets.token_hex(32),
            "submission_id": f"{r['id']}-1",
            "lease_expires_at": now + timedelta(days=1),
            "started_at": now - timedelta(seconds=rng.randint(60, 3600)),
        }
        for r in rows[:running]
    ]

    def fill(s: Any) -> None:
        s.execute(insert(Team), [{"name": t, "weight": 1.0 + i % 3} for i, t in enumerate(teams)])
        for k in range(0, len(rows), 2000):
            s.execute(insert(Job), rows[k : k + 2000])
        for k in range(0, len(attempts), 2000):
            s.execute(insert(Attempt), attempts[k : k + 2000])

    db.write(fill)
    for a in attempts:
        launcher.submitted[a["submission_id"]] = LaunchRequest(
            submission_id=a["submission_id"],
            job_id=a["job_id"],
            attempt=1,
            api_url="http://127.0.0.1",
            attempt_token="x",
            num_workers=1,
            cpus_per_worker=8.0 * per_running,
            gpus_per_worker=float(per_running),
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--big-nodes", type=int, default=500)
    ap.add_argument("--big-teams", type=int, default=50)
    ap.add_argument("--big-jobs", type=int, default=20_000)
    ap.add_argument("--live-queued", type=int, default=10_000)
    ap.add_argument("--live-running", type=int, default=2_000)
    ap.add_argument("--live-nodes", type=int, default=500)
    ap.add_argument("--live-churn", type=int, default=0, help="running jobs ending per tick")
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--db-url", default=os.environ.get("SHUNTER_TEST_POSTGRES_URL"))
    ap.add_argument("--only", default="day,big,live")
    ap.add_argument("--no-baseline", action="store_true", help="skip the every-tick replay")
    ap.add_argument("--small", action="store_true", help="tiny sizes (smoke test)")
    a = ap.parse_args()
    if a.small:
        a.hours, a.big_nodes, a.big_teams, a.big_jobs = 0.5, 8, 4, 80
        a.live_queued, a.live_running, a.live_nodes, a.ticks = 40, 8, 4, 3
        a.live_churn = a.live_churn or 1
    only = set(a.only.split(","))
    if "day" in only:
        day(a.hours, baseline=not a.no_baseline)
    if "big" in only:
        big(a.big_nodes, a.big_teams, a.big_jobs)
    if "live" in only:
        live(
            a.db_url,
            queued=a.live_queued,
            running=a.live_running,
            nodes=a.live_nodes,
            ticks=a.ticks,
            churn=a.live_churn,
        )


if __name__ == "__main__":
    main()
