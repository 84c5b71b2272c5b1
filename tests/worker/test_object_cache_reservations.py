"""The node cache counts fetches under way: two fetches at once (a streaming reader's prefetch
thread and its main thread, or two jobs) make room for each other, so together they stay under
the cap; and ``release`` unpins one object so it may be evicted."""

from __future__ import annotations

import threading
from pathlib import Path

from worker.object_cache import ObjectCache, Source


class Blob(Source):
    """``size`` bytes; ``gate``: wait for it inside the fetch (a fetch under way)."""

    def __init__(self, size: int, gate: threading.Event | None = None) -> None:
        self.name, self.n, self.gate = "blob", size, gate
        self.started = threading.Event()

    def size(self) -> int:
        return self.n

    def fetch_into(self, directory: Path) -> None:
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(30)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "data").write_bytes(b"x" * self.n)


def _total(cache: ObjectCache) -> int:
    return sum(cache.usage().values())


def test_two_fetches_at_once_stay_under_the_cap(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path, limit_bytes=10_000)
    for key in ("x", "y"):
        cache.get(key, Blob(4_000))
        cache.release(key)  # unpinned: evictable
    gate = threading.Event()
    slow = Blob(4_000, gate)
    other = ObjectCache(tmp_path, limit_bytes=10_000)  # a second reader (thread or job)
    fetch = threading.Thread(target=other.get, args=("a", slow))
    fetch.start()
    assert slow.started.wait(30)  # "a" made room (evicting x) and is being fetched
    cache.get("b", Blob(4_000))  # must count a's 4000 bytes: evicts y too
    gate.set()
    fetch.join(30)
    assert sorted(cache.usage()) == ["a", "b"]
    assert _total(cache) <= 10_000
    assert not list((tmp_path / "objects").glob("*.reserved"))  # each removed when done


def test_a_dead_fetchers_reservation_is_dropped(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path, limit_bytes=10_000)
    (tmp_path / "objects").mkdir(parents=True)
    (tmp_path / "objects" / "ghost.reserved").write_text("9000")  # no lock held: its process died
    cache.get("a", Blob(6_000))
    assert sorted(cache.usage()) == ["a"]
    assert not (tmp_path / "objects" / "ghost.reserved").exists()


def test_release_unpins_one_object(tmp_path: Path) -> None:
    cache = ObjectCache(tmp_path, limit_bytes=10_000)
    cache.get("kept", Blob(4_000))
    cache.get("done", Blob(4_000))
    cache.release("done")
    cache.get("new", Blob(4_000))  # room: "done" is evicted, "kept" is still pinned
    assert sorted(cache.usage()) == ["kept", "new"]
