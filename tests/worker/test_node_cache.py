"""A checkpoint read through a node's cache (a real local S3 server): only the blocks asked
for are downloaded, each once per node however many ranks ask at once, each checked against
the manifest's SHA-256 before anyone may read it."""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from s3_server import S3Server, aws_env, running_s3

import storage
from trainer_core.manifest import file_table, write_manifest
from worker.node_cache import CachedCheckpoint
from worker.staging import cached, localize

BLOCK = 1024


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with running_s3() as server, aws_env(server.env):
        yield server


@pytest.fixture
def stored(s3: S3Server, tmp_path: Path) -> tuple[str, dict[str, bytes]]:
    """A checkpoint in the bucket: a 10-block shard, a small file, an empty one."""
    src = tmp_path / "src" / "checkpoint-4"
    (src / "deepspeed").mkdir(parents=True)
    files = {
        "__0_0.distcp": os.urandom(10 * BLOCK - 100),  # a short last block
        "deepspeed/model_states.pt": os.urandom(300),
        "empty.json": b"",
    }
    for rel, data in files.items():
        (src / rel).write_bytes(data)
    write_manifest(src, file_table(src, block_size=BLOCK))
    uri = f"s3://{s3.bucket('c-' + secrets.token_hex(4))}/job/checkpoint-4"
    storage.upload_dir(src, uri)
    return uri, files


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every range request the cache makes: (file, offset, length)."""
    seen: list[tuple[str, int, int]] = []
    real = storage.open_ranges

    def counting(uri: str):  # type: ignore[no-untyped-def]
        class Counting:
            def __init__(self, inner: storage.RangeReader) -> None:
                self.size = inner.size
                self._inner = inner

            def read_at(self, offset: int, length: int) -> bytes:
                seen.append((uri.rsplit("checkpoint-4/", 1)[1], offset, length))
                return self._inner.read_at(offset, length)

        from contextlib import contextmanager

        @contextmanager
        def wrapped():  # type: ignore[no-untyped-def]
            with real(uri) as inner:
                yield Counting(inner)

        return wrapped()

    monkeypatch.setattr(storage, "open_ranges", counting)
    return seen


def _view(uri: str, node: Path) -> CachedCheckpoint:
    view = cached(localize(uri, node / "resume", local_rank=0))
    assert view is not None
    return view


def test_localize_fetches_the_manifest_once_per_node(
    stored: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    uri, _ = stored
    into = tmp_path / "node" / "resume"
    got: list[Path] = []
    waiter = threading.Thread(target=lambda: got.append(localize(uri, into, local_rank=1)))
    waiter.start()  # rank 1 waits for the node's local rank 0
    first = localize(uri, into, local_rank=0)
    waiter.join(timeout=30)
    assert got == [first] == [into / "checkpoint-4"]
    assert [p.name for p in first.iterdir()] == ["manifest.json"]  # nothing else yet
    assert cached(first) is not None and cached(tmp_path) is None  # local disk: no cache


def test_a_range_fetches_only_its_blocks(
    stored: tuple[str, dict[str, bytes]], tmp_path: Path, reads: list[tuple[str, int, int]]
) -> None:
    uri, files = stored
    view = _view(uri, tmp_path / "node")
    shard = files["__0_0.distcp"]
    path = view.fetch("__0_0.distcp", [(1500, 100)])  # inside block 1
    assert reads == [("__0_0.distcp", BLOCK, BLOCK)]
    with open(path, "rb") as fh:
        fh.seek(1500)
        assert fh.read(100) == shard[1500:1600]
    assert view.fetched() == {"__0_0.distcp": BLOCK}
    reads.clear()
    view.fetch("__0_0.distcp", [(1000, 1100), (5 * BLOCK, 3 * BLOCK)])  # blocks 0-2 and 5-7
    # Block 1 was here already; adjacent missing blocks come in one request.
    assert reads == [
        ("__0_0.distcp", 0, BLOCK),
        ("__0_0.distcp", 2 * BLOCK, BLOCK),
        ("__0_0.distcp", 5 * BLOCK, 3 * BLOCK),
    ]
    reads.clear()
    assert view.fetch("__0_0.distcp").read_bytes() == shard  # the rest: blocks 3-4, 8-9
    assert reads == [
        ("__0_0.distcp", 3 * BLOCK, 2 * BLOCK),
        ("__0_0.distcp", 8 * BLOCK, 2 * BLOCK - 100),
    ]
    assert view.fetched() == {"__0_0.distcp": len(shard)}
    reads.clear()
    assert view.fetch("__0_0.distcp").read_bytes() == shard
    assert view.fetch("empty.json").read_bytes() == b""
    assert reads == []  # all here already; an empty file needs no request


def test_concurrent_ranks_download_each_block_once(
    stored: tuple[str, dict[str, bytes]], tmp_path: Path, reads: list[tuple[str, int, int]]
) -> None:
    uri, files = stored
    path = localize(uri, tmp_path / "node" / "resume", local_rank=0)
    ranks = [CachedCheckpoint(uri, path) for _ in range(4)]  # 4 local ranks, one node
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def read(view: CachedCheckpoint) -> None:
        try:
            barrier.wait()
            assert view.fetch("__0_0.distcp").read_bytes() == files["__0_0.distcp"]
            assert (
                view.fetch("deepspeed/model_states.pt").read_bytes()
                == files["deepspeed/model_states.pt"]
            )
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=read, args=(view,)) for view in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    per_file: dict[str, int] = {}
    for rel, _, length in reads:
        per_file[rel] = per_file.get(rel, 0) + length
    assert per_file == {"__0_0.distcp": 10 * BLOCK - 100, "deepspeed/model_states.pt": 300}


def test_a_corrupt_object_fails_verification_and_is_not_cached(
    stored: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    uri, files = stored
    view = _view(uri, tmp_path / "node")
    shard = bytearray(files["__0_0.distcp"])
    shard[3 * BLOCK + 7] ^= 0xFF  # one bit flipped in block 3, same size
    storage.write_bytes(storage.join(uri, "__0_0.distcp"), bytes(shard))
    assert view.problem() is None  # the listing cannot tell; the bytes can
    view.fetch("__0_0.distcp", [(BLOCK, 10)])  # block 1 is intact: fine
    with pytest.raises(ValueError, match="block 3 does not match its SHA-256"):
        view.fetch("__0_0.distcp", [(3 * BLOCK, 10)])
    with pytest.raises(ValueError, match="block 3 does not match"):
        view.fetch("__0_0.distcp")  # a whole-file read fails on the same block
    assert view.fetched()["__0_0.distcp"] == 3 * BLOCK  # blocks 0-2 verified; 3 never marked
    small = files["deepspeed/model_states.pt"]
    flipped = small[:-1] + bytes([small[-1] ^ 0xFF])  # a changed last byte (never the same)
    storage.write_bytes(storage.join(uri, "deepspeed/model_states.pt"), flipped)
    with pytest.raises(ValueError, match="block 0 does not match its SHA-256"):
        view.fetch("deepspeed/model_states.pt")
    storage.write_bytes(storage.join(uri, "deepspeed/model_states.pt"), small + b"!")
    assert view.problem() == "deepspeed/model_states.pt has 301 bytes, manifest says 300"
    with pytest.raises(ValueError, match="has 301 bytes, manifest says 300"):
        view.fetch("deepspeed/model_states.pt")
    # The good bytes back in the bucket: the same cache now fetches them (nothing bad kept).
    storage.write_bytes(storage.join(uri, "__0_0.distcp"), files["__0_0.distcp"])
    assert view.fetch("__0_0.distcp").read_bytes() == files["__0_0.distcp"]


def test_what_the_manifest_does_not_list_is_never_fetched(
    stored: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    uri, _ = stored
    view = _view(uri, tmp_path / "node")
    storage.write_bytes(storage.join(uri, "hf.json"), b"{}")  # the step's model mark
    with pytest.raises(FileNotFoundError, match="not in the manifest"):
        view.fetch("hf.json")
    with pytest.raises(ValueError, match="outside its"):
        view.fetch("__0_0.distcp", [(10 * BLOCK - 150, 100)])
    storage.delete_tree(storage.join(uri, "empty.json"))
    assert view.problem() == "empty.json is missing"


def test_another_checkpoint_of_the_same_name_replaces_the_view(
    stored: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    uri, _ = stored
    node = tmp_path / "node"
    first = _view(uri, node)
    first.fetch("deepspeed/model_states.pt")
    src = tmp_path / "other" / "checkpoint-4"  # another run's step 4
    src.mkdir(parents=True)
    (src / "trainer_state.json").write_text('{"global_step": 4}')
    write_manifest(src)
    other = uri.replace("/job/", "/job-2/")
    storage.upload_dir(src, other)
    second = _view(other, node)
    assert second.path == first.path and second.uri == other
    assert set(second.files) == {"trainer_state.json"} and second.fetched() == {}
    assert not (second.path / "deepspeed").exists()  # the first one's files are gone
    assert second.fetch("trainer_state.json").read_text() == '{"global_step": 4}'
