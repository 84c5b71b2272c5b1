"""The node's object cache (``worker.object_cache``): verified objects under a byte cap, least
recently used evicted first, never one a process pins, fetched once per node, and a corrupt
object a typed error naming it. The store here is a local directory (the same code path as a
bucket: ``storage`` abstracts both); ``test_inputs.py`` runs the S3 side."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from storage.manifest import publish_object
from worker.classify import classify
from worker.object_cache import DataCorrupt, ManifestSource, ObjectCache, Source


def _object(store: Path, name: str, size: int) -> tuple[str, str]:
    """An object of ``size`` random bytes in the store: (its uri, its digest)."""
    src = store.parent / f"src-{name}"
    src.mkdir(parents=True)
    (src / "data.bin").write_bytes(os.urandom(size))
    digest, _ = publish_object(src, str(store))
    return str(store / "objects" / digest), digest


def _get(cache: ObjectCache, uri: str, digest: str, name: str = "ds-x") -> Path:
    return cache.get(f"obj-{digest}", ManifestSource(uri, name=name, digest=digest))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def test_fetches_verified_files_and_counts_bytes(store: Path, tmp_path: Path) -> None:
    uri, digest = _object(store, "a", 5000)
    cache = ObjectCache(tmp_path / "node", limit_bytes=10_000)
    got = _get(cache, uri, digest)
    assert (got / "data.bin").read_bytes() == (Path(uri) / "data.bin").read_bytes()
    assert cache.fetched_bytes == 5000
    again = ObjectCache(tmp_path / "node", limit_bytes=10_000)
    assert _get(again, uri, digest) == got and again.fetched_bytes == 0  # the node has it
    assert cache.usage() == {f"obj-{digest}": 5000}


def test_least_recently_used_is_evicted_under_the_cap(store: Path, tmp_path: Path) -> None:
    objs = {n: _object(store, n, 1000) for n in "abc"}
    node = tmp_path / "node"

    def use(name: str, when: float) -> None:
        cache = ObjectCache(node, limit_bytes=2500)
        _get(cache, *objs[name])
        cache.close()  # the job ended: unpinned
        mark = node / "objects" / f"obj-{objs[name][1]}.done"
        os.utime(mark, (when, when))  # its last use, made explicit (no clock in the test)

    use("a", 100)
    use("b", 200)
    use("a", 300)  # a is used again: b is now the least recently used
    use("c", 400)  # 3000 bytes would pass the 2500 cap: one goes
    held = ObjectCache(node).usage()
    assert set(held) == {f"obj-{objs['a'][1]}", f"obj-{objs['c'][1]}"}
    assert not (node / "objects" / f"obj-{objs['b'][1]}").exists()


def test_a_pinned_object_is_never_evicted(store: Path, tmp_path: Path) -> None:
    a, b, c = (_object(store, n, 1000) for n in "abc")
    node = tmp_path / "node"
    running = ObjectCache(node, limit_bytes=1500)
    path_a = _get(running, *a)  # a running job holds a
    other = ObjectCache(node, limit_bytes=1500)
    _get(other, *b)  # over the cap, but a is pinned: kept
    assert (path_a / "data.bin").exists()
    assert set(other.usage()) == {f"obj-{a[1]}", f"obj-{b[1]}"}
    other.close()
    running.close()  # the job ended
    third = ObjectCache(node, limit_bytes=1500)
    os.utime(node / "objects" / f"obj-{a[1]}.done", (1, 1))  # a is the older one
    _get(third, *c)
    assert set(third.usage()) == {f"obj-{c[1]}"}  # both unpinned now: evicted to fit


def test_a_pin_in_another_process_holds(store: Path, tmp_path: Path) -> None:
    """The pin is a lock the kernel holds for the process: a child that pins an object and
    waits keeps it from this process's evictions."""
    import multiprocessing as mp

    a, b = _object(store, "a", 1000), _object(store, "b", 1000)
    node = tmp_path / "node"
    ctx = mp.get_context("spawn")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_pin_and_wait, args=(node, a, ready, done))
    child.start()
    try:
        assert ready.wait(60)
        ours = ObjectCache(node, limit_bytes=1000)
        _get(ours, *b)
        assert (node / "objects" / f"obj-{a[1]}" / "data.bin").exists()
    finally:
        done.set()
        child.join(60)
    ours.close()
    ObjectCache(node, limit_bytes=1000)._make_room(1000, keep="none")
    assert ObjectCache(node).usage() == {}  # unpinned once the child ended


def _pin_and_wait(node: Path, obj: tuple[str, str], ready: Any, done: Any) -> None:
    cache = ObjectCache(node, limit_bytes=10_000)
    _get(cache, *obj)
    ready.set()
    done.wait(60)


def test_a_corrupt_object_fails_with_a_typed_error_naming_it(store: Path, tmp_path: Path) -> None:
    uri, digest = _object(store, "a", 3000)
    data = Path(uri) / "data.bin"
    raw = bytearray(data.read_bytes())
    raw[10] ^= 0xFF  # one flipped bit in the bucket: same size, wrong bytes
    data.write_bytes(bytes(raw))
    cache = ObjectCache(tmp_path / "node")
    with pytest.raises(DataCorrupt, match="ds-team-data") as err:
        _get(cache, uri, digest, name="ds-team-data")
    assert classify(err.value).type == "data_corrupt"
    assert "ds-team-data" in classify(err.value).message
    assert cache.usage() == {} and not cache.path(f"obj-{digest}").exists()  # nothing kept


def test_a_manifest_that_is_not_the_digest_is_corrupt(store: Path, tmp_path: Path) -> None:
    uri, digest = _object(store, "a", 100)
    (Path(uri) / "manifest.json").write_text('{"files": {}}')
    with pytest.raises(DataCorrupt, match="does not hash to"):
        _get(ObjectCache(tmp_path / "node"), uri, digest)
    (Path(uri) / "manifest.json").unlink()
    with pytest.raises(DataCorrupt, match=r"no manifest\.json"):
        _get(ObjectCache(tmp_path / "node"), uri, digest)


class _Gated(Source):
    """A source whose fetch waits until the test lets it finish; counts its fetches."""

    name = "gated"

    def __init__(self) -> None:
        self.fetches = 0
        self.entered, self.release = threading.Event(), threading.Event()

    def size(self) -> int:
        return 3

    def fetch_into(self, directory: Path) -> None:
        self.fetches += 1
        self.entered.set()
        assert self.release.wait(30)
        directory.mkdir(parents=True)
        (directory / "f").write_bytes(b"abc")


def test_two_readers_on_one_node_fetch_once(tmp_path: Path) -> None:
    """The second reader arrives while the first is fetching: it waits on the object's lock
    (a flock: per open file, so two caches in one process contend like two processes) and
    finds it there."""
    source = _Gated()
    node = tmp_path / "node"
    first, second = ObjectCache(node), ObjectCache(node)
    got: list[Path] = []
    t1 = threading.Thread(target=lambda: got.append(first.get("k", source)))
    t1.start()
    assert source.entered.wait(30)  # the first holds the lock, mid-fetch
    t2 = threading.Thread(target=lambda: got.append(second.get("k", source)))
    t2.start()
    t2.join(0.2)
    assert t2.is_alive()  # waiting on the lock, not fetching
    source.release.set()
    t1.join(30)
    t2.join(30)
    assert source.fetches == 1
    assert got == [node / "objects" / "k"] * 2
    assert first.fetched_bytes + second.fetched_bytes == 3


def test_keys_cannot_escape_the_cache(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a cache key"):
        ObjectCache(tmp_path).path("../x")


def test_the_environment_sets_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.object_cache import default_cache

    monkeypatch.setenv("SHUNTER_NODE_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.setenv("SHUNTER_NODE_CACHE_BYTES", "12345")
    cache = default_cache()
    assert (cache.root, cache.limit_bytes) == (tmp_path / "c", 12345)
    monkeypatch.setenv("SHUNTER_NODE_CACHE_BYTES", "2GB")
    with pytest.raises(ValueError, match="SHUNTER_NODE_CACHE_BYTES='2GB'"):
        default_cache()
