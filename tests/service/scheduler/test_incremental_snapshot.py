"""The rows kept across ticks (``scheduler.job_rows``, ``db.changes``) against full reads.

Random sequences of the writes the service makes (submits, claims, starts, progress with
metric points, checkpoint-now requests, requeues, ends, cancels, deletes, priority changes,
lease renewals) and the scheduler's own queue writes on a real database; after each few, the
rows kept across ticks are brought up to date and the snapshot built from them must equal
one built by reading everything, and so must the plan, its ETAs, the kept queue index, and
the active attempts the sweep and the hang watch keep.
SQLite always; PostgreSQL with SHUNTER_TEST_POSTGRES_URL, where writers also commit out of
order around a read.
"""

from __future__ import annotations

import random
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, insert, select, text, update
from sqlalchemy.orm import Session

from service.db.changes import KeptRows
from service.db.engine import Database
from service.db.tables import ACTIVE, Attempt, Job, MetricPoint, Team
from service.health.hang import SpecBits, Watched, kept_watched
from service.jobs.reconcile import ActiveAttempt, kept_active
from service.launch import (
    ClusterResources,
    InMemoryLauncher,
    LaunchState,
    LaunchStatus,
    NodeResources,
)
from service.policy.capacity import PackMemo, memo
from service.policy.eta import estimate_starts
from service.policy.planner import Plan, PolicyConfig, plan
from service.policy.queue_index import QueueIndex
from service.policy.snapshot import Snapshot
from service.scheduler import owed
from service.scheduler import snapshot_reader as snapshot_mod
from service.scheduler.job_rows import JobRows
from service.scheduler.loop import Scheduler
from service.scheduler.record import store_queue
from service.scheduler.snapshot_reader import build_snapshot
from service.scheduler.usage import Usage
from service.settings import Settings

TEAMS = ("a", "b", "c")
NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # a time in a waiting reason
# Short: the usage window (10 half-lives, 100 min) moves past attempts within a test.
HALF_LIFE_S = 600.0
CLUSTER = ClusterResources(
    nodes=[
        NodeResources(
            node_id=f"n{i}",
            address="127.0.0.1",
            alive=True,
            total_cpus=16,
            free_cpus=16,
            total_gpus=4,
            free_gpus=4,
        )
        for i in range(3)
    ]
)


class World:
    """The jobs a test writes, and the writes it may make next."""

    def __init__(self, db: Database, rng: random.Random) -> None:
        self.db, self.rng = db, rng
        self.n = 0
        self.steps = 0  # metric steps drawn so far: every point is new
        self.now = NOW

    def ids(self, *statuses: str) -> list[str]:
        return self.db.read(
            lambda s: list(
                s.execute(select(Job.id).where(Job.status.in_(statuses)).order_by(Job.id)).scalars()
            )
        )

    def pick(self, *statuses: str) -> str | None:
        ids = self.ids(*statuses)
        return self.rng.choice(ids) if ids else None

    def submit(self) -> None:
        self.n += 1
        r = self.rng
        spec: dict[str, Any] = {}
        if r.random() < 0.7:
            spec["max_runtime_seconds"] = r.choice([600, 3600, 7200])
        if r.random() < 0.3:
            spec["scheduling"] = {"preemptible": r.random() < 0.5}
        row = {
            "id": f"job-{self.n:05d}-{r.getrandbits(16):04x}",
            "team": r.choice(TEAMS),
            "name": f"j{self.n}",
            "status": "queued",
            "priority": r.choice(["low", "normal", "normal", "high"]),
            "spec": spec,
            "created_at": self.now - timedelta(seconds=r.randint(0, 3600)),
            "updated_at": self.now,
            "num_workers": r.choice([1, 1, 2]),
            "cpus_per_worker": float(r.choice([1, 2, 4])),
            "gpus_per_worker": float(r.choice([0, 1, 1, 2])),
        }
        self.db.write(lambda s: s.execute(insert(Job).values(**row)))

    def claim(self) -> None:
        job_id = self.pick("queued")
        if job_id is None:
            return

        def go(s: Session) -> None:
            n = s.execute(select(Job.attempt).where(Job.id == job_id)).scalar_one() + 1
            s.execute(update(Job).where(Job.id == job_id).values(status="starting", attempt=n))
            s.execute(
                insert(Attempt).values(
                    job_id=job_id,
                    number=n,
                    status=ACTIVE,
                    token_hash=secrets.token_hex(32),
                    submission_id=f"{job_id}-{n}",
                    lease_expires_at=self.now + timedelta(minutes=5),
                    started_at=self.now - timedelta(seconds=self.rng.randint(0, 900)),
                )
            )

        self.db.write(go)

    def run(self) -> None:
        job_id = self.pick("starting")
        if job_id is not None:
            self.db.write(
                lambda s: s.execute(update(Job).where(Job.id == job_id).values(status="running"))
            )

    def progress(self) -> None:
        """A metrics batch: points for the current attempt and the job's progress, in one
        transaction (as ``jobs.attempts`` writes them)."""
        job_id = self.pick("running")
        if job_id is None:
            return
        self.steps += 20
        step = self.steps

        def go(s: Session) -> None:
            n = s.execute(select(Job.attempt).where(Job.id == job_id)).scalar_one()
            for k in (0, 1):
                s.execute(
                    insert(MetricPoint).values(
                        job_id=job_id,
                        attempt=n,
                        step=step + k * 10,
                        name="loss",
                        value=1.0,
                        time=self.now - timedelta(seconds=60 * (1 - k) + self.rng.randint(1, 9)),
                    )
                )
            s.execute(
                update(Job)
                .where(Job.id == job_id)
                .values(progress_step=step + 10, progress_total_steps=1000, updated_at=self.now)
            )

        self.db.write(go)

    def _attempt(self, job_id: str, **values: Any) -> None:
        self.db.write(
            lambda s: s.execute(
                update(Attempt)
                .where(Attempt.job_id == job_id, Attempt.status == ACTIVE)
                .values(**values)
            )
        )

    def stop_request(self) -> None:
        job_id = self.pick("running", "starting")
        if job_id is not None:
            self._attempt(job_id, stop_requested_at=self.now, stop_cause="preempt")

    def renew(self) -> None:
        """A heartbeat: a column the snapshot does not read (stamps nothing)."""
        job_id = self.pick("running")
        if job_id is not None:
            self._attempt(job_id, lease_expires_at=self.now + timedelta(minutes=10))

    def _end(self, job_id: str, *, attempt: str, job: str) -> None:
        def go(s: Session) -> None:
            s.execute(
                update(Attempt)
                .where(Attempt.job_id == job_id, Attempt.status == ACTIVE)
                .values(status=attempt, ended_at=self.now - timedelta(seconds=1))
            )
            s.execute(update(Job).where(Job.id == job_id).values(status=job))

        self.db.write(go)

    def requeue(self) -> None:
        job_id = self.pick("running", "starting")
        if job_id is not None:
            self._end(job_id, attempt=self.rng.choice(["preempted", "lost"]), job="queued")

    def finish(self) -> None:
        job_id = self.pick("running")
        if job_id is not None:
            self._end(job_id, attempt="succeeded", job="succeeded")

    def cancel(self) -> None:
        job_id = self.pick("queued")
        if job_id is not None:
            self.db.write(
                lambda s: s.execute(update(Job).where(Job.id == job_id).values(status="cancelled"))
            )

    def delete(self) -> None:
        """A finished job's rows go (``jobs.delete``): no row is left to stamp."""
        job_id = self.pick("succeeded", "cancelled")
        if job_id is None:
            return

        def go(s: Session) -> None:
            s.execute(delete(MetricPoint).where(MetricPoint.job_id == job_id))
            s.execute(delete(Attempt).where(Attempt.job_id == job_id))
            s.execute(delete(Job).where(Job.id == job_id))

        self.db.write(go)

    def cancel_and_delete(self) -> None:
        """Cancelled and deleted between two reads: the job the reader holds is gone."""
        job_id = self.pick("queued")
        if job_id is None:
            return
        self.db.write(
            lambda s: s.execute(update(Job).where(Job.id == job_id).values(status="cancelled"))
        )
        self.db.write(lambda s: s.execute(delete(Job).where(Job.id == job_id)))

    def cancel_request(self) -> None:
        """A cancel of a running job: the sweep stops it, the hang watch no longer judges it."""
        job_id = self.pick("running", "starting")
        if job_id is not None:
            self.db.write(
                lambda s: s.execute(
                    update(Job).where(Job.id == job_id).values(cancel_requested=True)
                )
            )

    def reprioritise(self) -> None:
        job_id = self.pick("queued")
        if job_id is not None:
            p = self.rng.choice(["low", "normal", "high"])
            self.db.write(
                lambda s: s.execute(update(Job).where(Job.id == job_id).values(priority=p))
            )

    def reweigh(self) -> None:
        w = float(self.rng.randint(1, 3))
        team = self.rng.choice(TEAMS)
        self.db.write(lambda s: s.execute(update(Team).where(Team.name == team).values(weight=w)))

    def step(self) -> None:
        ops: list[tuple[Callable[[], None], int]] = [
            (self.submit, 6),
            (self.claim, 4),
            (self.run, 3),
            (self.progress, 3),
            (self.stop_request, 1),
            (self.renew, 2),
            (self.requeue, 2),
            (self.finish, 2),
            (self.cancel, 1),
            (self.cancel_request, 1),
            (self.delete, 1),
            (self.cancel_and_delete, 1),
            (self.reprioritise, 2),
            (self.reweigh, 1),
        ]
        fns, weights = zip(*ops, strict=True)
        self.rng.choices(fns, weights=weights)[0]()


def _frozen_now(monkeypatch: pytest.MonkeyPatch, world: World) -> None:
    """Both snapshots of a comparison read one ``now`` (SQLite's clock moves between them)."""
    monkeypatch.setattr(snapshot_mod, "db_now", lambda _s: world.now)


def _same_decisions(kept: Snapshot, fresh: Snapshot, packs: PackMemo) -> Plan:
    """The plan, its ETAs and the owed account's shares: the kept snapshot's with the
    loop's packing memo (kept across ticks), the fresh one's computed afresh. Returns the
    plan at the loop's depth."""
    cfg = PolicyConfig.named("fair", grace_s=60.0, min_runtime_s=60.0)
    assert owed.shares(kept) == owed.shares(fresh)  # by the kept index / by the queue
    plans = []
    for depth in (None, 3):
        with memo(packs):
            p_kept = plan(kept, cfg, max_depth=depth)
            etas_kept = estimate_starts(kept, plan_now=p_kept)
        p_fresh = plan(fresh, cfg, max_depth=depth)
        assert p_kept == p_fresh
        assert etas_kept == estimate_starts(fresh, plan_now=p_fresh)
        plans.append(p_kept)
    return plans[-1]


def _index_rows(idx: QueueIndex) -> Any:
    return (
        {t: [(k, e.job_id) for k, e in rows] for t, rows in idx.per_team.items()},
        {sh: (st.count, st.preemptible, st.lefts) for sh, st in idx.shapes.items()},
        {t: dict(c) for t, c in idx.team_shapes.items()},
        idx.size,
    )


@dataclass
class Kept:
    """What the live loop keeps across ticks."""

    rows: JobRows = field(default_factory=JobRows)
    usage: Usage = field(default_factory=Usage)
    index: QueueIndex = field(default_factory=lambda: QueueIndex(use_priority=True))
    packs: PackMemo = field(default_factory=PackMemo)
    active: KeptRows[ActiveAttempt] = field(default_factory=kept_active)
    specs: dict[str, SpecBits] = field(default_factory=dict)
    watched: KeptRows[Watched] | None = None


def _compare(db: Database, k: Kept) -> str:
    """Bring what ``k`` keeps up to date as the live loop does; check it against full reads
    of the same database state."""
    with memo(k.packs):
        kept = db.read(
            lambda s: build_snapshot(
                s, cluster=CLUSTER, half_life_s=HALF_LIFE_S, rows=k.rows, usage=k.usage
            )
        )
    changed = k.rows.take_changed()
    if changed is None:
        k.index = k.index.sync(kept.queued)
    else:
        k.index.update(changed)
    fresh_rows = JobRows()
    fresh = db.read(
        lambda s: build_snapshot(s, cluster=CLUSTER, half_life_s=HALF_LIFE_S, rows=fresh_rows)
    )
    # Queued entries, active jobs with their ends, teams (usage history), free capacity.
    assert kept == fresh
    assert k.rows.jobs.keys() == fresh_rows.jobs.keys()
    for job_id, got in k.rows.jobs.items():
        want = fresh_rows.jobs[job_id]
        assert (got.key, got.status, got.current, got.rate) == (
            want.key,
            want.status,
            want.current,
            want.rate,
        ), job_id
    # The queue columns as read and then as written (not stamped): what the database has.
    assert k.rows.stored == fresh_rows.stored
    assert k.rows.not_stale == fresh_rows.not_stale
    assert _index_rows(k.index) == _index_rows(QueueIndex.build(fresh.queued, use_priority=True))
    p = _same_decisions(replace(kept, index=k.index), fresh, k.packs)
    # The loop's queue writes (depth 3: some jobs marked stale), applied to what it keeps.
    reasons = {d.entry.job_id: d.reason for d in p.decisions if d.reason is not None}
    etas = estimate_starts(kept, plan_now=p)
    written = db.write(
        lambda s: store_queue(
            s,
            plan=p,
            reasons=reasons,
            starts=etas,
            snap=kept,
            computed_at=kept.now,
            stored=k.rows,
        )
    )
    k.rows.wrote(written)
    # The sweep's and the hang watch's kept rows against reads in full.
    assert k.active.fetch(db) == kept_active().fetch(db)
    k.watched = k.watched or kept_watched(k.specs)
    assert k.watched.fetch(db) == kept_watched({}).fetch(db)
    return k.rows.last_read


def _teams(db: Database) -> None:
    db.write(lambda s: s.execute(insert(Team), [{"name": t, "weight": 1.0} for t in TEAMS]))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_kept_rows_equal_a_full_read_over_random_writes(
    db_url: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = Database(db_url)
    try:
        world = World(db, random.Random(seed))
        _frozen_now(monkeypatch, world)
        _teams(db)
        for _ in range(12):
            world.submit()
        k = Kept()
        reads = []
        for _ in range(60):
            for _ in range(world.rng.randint(0, 3)):
                world.step()
            world.now += timedelta(seconds=world.rng.choice([0, 1, 30, 30, 1200]))
            reads.append(_compare(db, k).split(":")[0])
        # Both paths ran: the changed-rows read most ticks, a full read after a deletion;
        # the memo gave back packings of running jobs that had not changed.
        assert reads.count("changed") > 30 and reads[0] == "full"
        assert k.packs.hits > 0 and k.packs.misses > 0
    finally:
        db.dispose()


def test_a_deleted_job_makes_a_full_read(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    db = Database(db_url)
    try:
        world = World(db, random.Random(0))
        _frozen_now(monkeypatch, world)
        _teams(db)
        for _ in range(5):
            world.submit()
        k = Kept()
        _compare(db, k)
        how = _compare(db, k)
        # Nothing written since: an incremental read of nothing. On PostgreSQL too, although
        # other tests' transactions may be open in the cluster: the watermark is the
        # snapshot's xmax and in-progress list, not its xmin (service.db.changes), and their
        # ids stamp none of these jobs.
        assert how == "changed: 0", how
        world.cancel_and_delete()
        how = _compare(db, k)
        assert how == "full: a job was deleted"
    finally:
        db.dispose()


def test_without_the_triggers_every_read_is_full(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A table rebuilt without its triggers (or a trigger disabled): nothing is stamped any
    more, so the watermark is uncertain and every tick reads everything."""
    db = Database(db_url)
    try:
        world = World(db, random.Random(0))
        _frozen_now(monkeypatch, world)
        _teams(db)
        world.submit()
        k = Kept()
        _compare(db, k)
        drop = (
            "DROP TRIGGER jobs_change_seq"
            if db.is_sqlite
            else "ALTER TABLE jobs DISABLE TRIGGER jobs_change_seq"
        )
        db.write(lambda s: s.execute(text(drop)))
        world.submit()
        world.reprioritise()
        for _ in range(2):
            how = _compare(db, k)
            assert how == "full: the change triggers are missing"
    finally:
        if not db.is_sqlite:  # the session's schema is shared by every test
            db.write(lambda s: s.execute(text("ALTER TABLE jobs ENABLE TRIGGER jobs_change_seq")))
        db.dispose()


def test_rows_stamped_on_writes_the_snapshot_reads(db_url: str) -> None:
    db = Database(db_url)
    try:
        world = World(db, random.Random(0))
        _teams(db)
        world.submit()
        world.claim()
        world.run()

        def seqs(s: Session) -> tuple[int, int]:
            job = s.execute(select(Job.change_seq)).scalar_one()
            att = s.execute(select(Attempt.change_seq)).scalar_one()
            return job, att

        job0, att0 = db.read(seqs)
        assert job0 > 0 and att0 > 0
        world.renew()  # the lease: not read by the snapshot, not stamped
        assert db.read(seqs) == (job0, att0)
        world.progress()  # the job's row (its progress), not its attempt
        job1, att1 = db.read(seqs)
        assert job1 > job0 and att1 == att0
        world.stop_request()
        job2, att2 = db.read(seqs)
        assert job2 == job1 and att2 > job1
    finally:
        db.dispose()


# Written only by the scheduler leader, which applies its writes to what it keeps.
QUEUE_COLUMNS = {
    "queue_position",
    "pending_reason",
    "estimated_start_at",
    "estimated_start_p90_at",
    "estimated_end_at",
    "estimated_at",
    "queue_stale",
}


def test_every_jobs_column_but_the_queue_columns_stamps_the_row(db_url: str) -> None:
    """The jobs trigger lists its columns (so the leader's queue writes are not stamped): a
    column it missed would change unseen by every kept read. Each column set on its own
    must stamp the row, each queue column must not."""
    db = Database(db_url)
    try:
        _teams(db)
        World(db, random.Random(0)).submit()

        def stamp() -> int:
            return db.read(lambda s: s.execute(select(Job.change_seq)).scalar_one())

        for column in Job.__table__.columns:
            if column.name == "change_seq":
                continue
            before = stamp()
            sql = f"UPDATE jobs SET {column.name} = {column.name}"
            db.write(lambda s, sql=sql: s.execute(text(sql)))
            assert (stamp() != before) == (column.name not in QUEUE_COLUMNS), column.name
    finally:
        db.dispose()


@pytest.mark.postgres
def test_a_writer_that_commits_after_a_later_one_is_not_missed(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """T1 writes job A, T2 (a later transaction id) writes job B and commits, the scheduler
    reads (B shows, A does not), then T1 commits: the next read must see A. A watermark of
    "the highest stamp seen" would skip A; the snapshot's in-progress list does not."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite admits one writer at a time")
    db = Database(db_url)
    try:
        world = World(db, random.Random(0))
        _frozen_now(monkeypatch, world)
        _teams(db)
        world.submit()
        world.submit()
        a, b = world.ids("queued")
        k = Kept()
        _compare(db, k)
        with db.engine.connect() as t1, db.engine.connect() as t2:
            t1.execute(update(Job).where(Job.id == a).values(priority="high"))
            t2.execute(update(Job).where(Job.id == b).values(priority="low"))
            t2.commit()
            kept = db.read(
                lambda s: build_snapshot(s, cluster=CLUSTER, half_life_s=HALF_LIFE_S, rows=k.rows)
            )
            by_id = {e.job_id: e.priority for e in kept.queued}
            assert by_id[b] == "low" and by_id[a] != "high"
            t1.commit()
        how = _compare(db, k)
        assert how.startswith("changed")
        assert k.rows.jobs[a].entry.priority == "high"
    finally:
        db.dispose()


@pytest.mark.postgres
def test_an_open_transaction_that_writes_no_job_costs_nothing(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long transaction elsewhere (an idle session, a report) holds the snapshot's xmin
    back; the watermark (xmax and the in-progress list) does not depend on it, so the jobs
    written while it stays open are read once, not again at every tick."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite admits one writer at a time")
    db = Database(db_url)
    try:
        world = World(db, random.Random(0))
        _frozen_now(monkeypatch, world)
        _teams(db)
        k = Kept()
        _compare(db, k)
        with db.engine.connect() as idle:
            idle.execute(text("SELECT pg_current_xact_id()"))  # open, with an id, writes no job
            for _ in range(20):
                world.submit()
            assert _compare(db, k) == "changed: 20"
            assert _compare(db, k) == "changed: 0"
            idle.rollback()
    finally:
        db.dispose()


def _loop(url: str, tmp: Path) -> tuple[Scheduler, InMemoryLauncher]:
    launcher = InMemoryLauncher()
    launcher.nodes = [
        NodeResources(
            node_id=f"n{i}",
            address="127.0.0.1",
            alive=True,
            total_cpus=16,
            free_cpus=16,
            total_gpus=4,
            free_gpus=4,
        )
        for i in range(4)
    ]
    settings = Settings(
        home=tmp / "home",
        database_url=url,
        data_roots=[tmp],
        launcher="memory",
        run_scheduler=False,
        migrate_on_start=False,
        lease_seconds=86_400.0,
        scheduler_max_plan_depth=8,
    )
    return Scheduler(settings, Database(url), launcher), launcher


def _churn(sched: Scheduler, launcher: InMemoryLauncher, rng: random.Random) -> None:
    """Some of the jobs the scheduler started report running, some of those succeed."""
    from service.jobs.attempts import report_status
    from service.schemas.internal import StatusIn

    for sub, req in sorted(launcher.submitted.items()):
        state = launcher.states[sub].state
        if state == LaunchState.PENDING and rng.random() < 0.7:
            launcher.states[sub] = LaunchStatus(state=LaunchState.RUNNING)
            body = StatusIn(status="running")
        elif state == LaunchState.RUNNING and rng.random() < 0.3:
            launcher.states[sub] = LaunchStatus(state=LaunchState.SUCCEEDED)
            body = StatusIn(status="succeeded")
        else:
            continue
        sched.db.write(
            lambda s, r=req, b=body: report_status(
                s, job_id=r.job_id, attempt=r.attempt, body=b, lease_seconds=600.0
            )
        )


def test_the_loop_decides_alike_with_kept_reads_and_full_reads(
    tmp_path: Path, sqlite_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two leaders on two copies of one database, one keeping its reads across ticks, the
    other reading everything every tick; jobs start, run and end (the same drivers' reports
    on both), more are submitted, on one clock stepped a minute a tick: every tick starts
    and preempts the same jobs on both."""
    urls = []
    for name in ("kept", "full"):
        shutil.copyfile(sqlite_template, tmp_path / f"{name}.db")
        urls.append(f"sqlite:///{tmp_path / name}.db")
    clock = {"now": NOW}
    monkeypatch.setattr(snapshot_mod, "db_now", lambda _s: clock["now"])
    loops = [_loop(url, tmp_path) for url in urls]
    worlds = [World(sched.db, random.Random(7)) for sched, _ in loops]
    try:
        for w in worlds:
            w.now = NOW - timedelta(hours=1)
            _teams(w.db)
            for _ in range(40):
                w.submit()
        rngs = [random.Random(3), random.Random(3)]
        for tick in range(25):
            seen = []
            for (sched, launcher), w, rng in zip(loops, worlds, rngs, strict=True):
                if tick:
                    _churn(sched, launcher, rng)
                    for _ in range(rng.randint(0, 2)):
                        w.submit()
                if sched is loops[1][0]:  # the other reads everything every tick
                    sched._forget()
                report = sched.tick()
                assert not report.errors, report.errors
                # An attempt's started_at is its database's own clock (two databases claim a
                # few ms apart), so a reservation's time may differ by a second between them.
                waiting = {j: _AT.sub("<time>", why) for j, why in report.waiting.items()}
                seen.append((sorted(report.started), sorted(report.preempted), waiting))
            assert seen[0] == seen[1], tick
            clock["now"] += timedelta(minutes=1)
        assert loops[0][0]._rows.last_read.startswith("changed")
        ended = [s for s, st in loops[0][1].states.items() if st.state == LaunchState.SUCCEEDED]
        assert len(ended) > 5 and len(loops[0][1].submitted) > 20
    finally:
        for sched, _ in loops:
            sched.db.dispose()
