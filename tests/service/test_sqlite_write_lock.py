"""SQLite writers queue on ``SqliteWriteLock`` (service/db/engine.py): one writer at a time
across processes (an ``flock``; two ``Database`` objects stand for two processes, each with
its own open file), re-entrant within a thread, and waiting without the busy handler's
polling."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

from sqlalchemy import text

from service.db.engine import Database, SqliteWriteLock


def test_writers_of_two_databases_never_overlap(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    first, second = Database(url), Database(url)
    first.write(lambda s: s.execute(text("CREATE TABLE t (n INTEGER)")))
    spans: list[tuple[float, float]] = []
    guard = threading.Lock()

    def work(db: Database) -> None:
        for _ in range(5):

            def fn(s: object) -> None:
                start = time.monotonic()
                s.execute(text("INSERT INTO t VALUES (1)"))  # type: ignore[attr-defined]
                time.sleep(0.01)
                with guard:
                    spans.append((start, time.monotonic()))

            db.write(fn)

    threads = [threading.Thread(target=work, args=(db,)) for db in (first, second, first)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans.sort()
    assert len(spans) == 15
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), spans
    assert first.read(lambda s: s.execute(text("SELECT count(*) FROM t")).scalar_one()) == 15
    assert (tmp_path / "x.db.writelock").exists()


def test_a_write_inside_a_write_takes_the_lock_once(tmp_path: Path) -> None:
    lock = SqliteWriteLock(str(tmp_path / "y.db"))
    other = SqliteWriteLock(str(tmp_path / "y.db"))  # another process's view
    with lock.hold(), lock.hold():
        pass
    done = threading.Event()

    def take() -> None:
        with other.hold():
            done.set()

    with lock.hold():
        t = threading.Thread(target=take)
        t.start()
        assert not done.wait(0.2)  # held across "processes"
    assert done.wait(5)
    t.join()
