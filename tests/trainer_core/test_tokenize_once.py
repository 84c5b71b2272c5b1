"""Tokenise once per cluster: ``load_tokenized`` with a ``SharedData`` (the worker's
``NodeInputs``) reads the store's tokenised copy when one has the key, and two jobs racing
on a key build it once. The store is a local directory here; each "node" has its own cache
directory, as nodes with private disks do."""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from tc_helpers import MINILM

from trainer_core import data as data_mod
from trainer_core.config import DataConfig, DataSource, ModelConfig
from trainer_core.data import fingerprint, load_tokenized
from trainer_core.model import build_tokenizer
from worker.inputs import NodeInputs, tokenized_root
from worker.object_cache import ObjectCache

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_tokenizer(ModelConfig(name_or_path=MINILM, task="causal-lm"))


@pytest.fixture
def calls(tok: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every call of the tokenizer (one per batch of rows it encodes)."""
    seen: list[int] = []
    real = type(tok).__call__

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(type(tok), "__call__", counting)
    return seen


def _node(tmp_path: Path, name: str) -> NodeInputs:
    cache = ObjectCache(tmp_path / name / "cache")
    return NodeInputs(cache, tokenized=tokenized_root(str(tmp_path / "store")))


def _load(tmp_path: Path, node: NodeInputs, path: Path, tok: Any, **cfg: Any) -> Any:
    source = DataSource(path=str(path))
    dc = DataConfig(train=source, **cfg)
    root = tmp_path / f"tok-{id(node)}"
    return load_tokenized(
        source, dc, task="causal-lm", tokenizer=tok, cache_root=root, shared=node, poll_s=0.05
    )


def _corpus(path: Path) -> Path:
    path.write_text("".join(f"line {i} of a small corpus\n" for i in range(40)))
    return path


def test_a_second_node_loads_the_store_copy(tmp_path: Path, tok: Any, calls: list[int]) -> None:
    data = _corpus(tmp_path / "corpus.txt")
    first = _load(tmp_path, _node(tmp_path, "node-a"), data, tok, max_length=16)
    assert calls  # the first job tokenised
    stored = list((tmp_path / "store" / ".cache" / "tokenized").iterdir())
    assert [p.name for p in stored if p.is_dir()] and all(
        (p / "manifest.json").exists() for p in stored if p.is_dir()
    )
    calls.clear()
    fresh = _node(tmp_path, "node-b")  # a fresh node: its own empty cache
    second = _load(tmp_path, fresh, data, tok, max_length=16)
    assert calls == []  # read from the store, no tokenising
    assert second["input_ids"] == first["input_ids"]
    assert fresh.cache.fetched_bytes > 0  # fetched through its node cache
    # Another max_length is another key: tokenises again.
    _load(tmp_path, _node(tmp_path, "node-c"), data, tok, max_length=8)
    assert calls


def test_the_key_is_the_content_not_the_path(tmp_path: Path, tok: Any) -> None:
    a = _corpus(tmp_path / "a.txt")
    b = tmp_path / "elsewhere" / "b.txt"
    b.parent.mkdir()
    b.write_bytes(a.read_bytes())
    cfg = DataConfig(train=DataSource(path=str(a)), max_length=16)

    def key(p: Path) -> str:
        return fingerprint(DataSource(path=str(p)), cfg, "causal-lm", tok)

    assert key(a) == key(b)
    b.write_text("other bytes\n")
    assert key(a) != key(b)


def test_two_racing_jobs_build_once(
    tmp_path: Path, tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two jobs on two nodes load the same key at once: one claims and builds, the other
    waits for its copy in the store."""
    data = _corpus(tmp_path / "corpus.txt")
    builds: list[str] = []
    real = data_mod._tokenize

    def counting(*args: Any, **kwargs: Any) -> Any:
        builds.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(data_mod, "_tokenize", counting)
    results: dict[str, Any] = {}
    nodes = {n: _node(tmp_path, n) for n in ("node-a", "node-b")}

    def job(name: str) -> None:
        results[name] = _load(tmp_path, nodes[name], data, tok, max_length=16)

    threads = [threading.Thread(target=job, args=(n,), name=n) for n in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(builds) == 1
    assert results["node-a"]["input_ids"] == results["node-b"]["input_ids"]
    claims = list((tmp_path / "store" / ".cache" / "tokenized").glob("*.claim"))
    assert claims == []  # released


def test_a_lapsed_claim_is_taken_over(tmp_path: Path) -> None:
    a, b = _node(tmp_path, "node-a"), _node(tmp_path, "node-b")
    a.lease_s = b.lease_s = 60.0
    with a.claim_tokenized("k") as mine_a:
        assert mine_a
        with b.claim_tokenized("k") as mine_b:
            assert not mine_b  # live: a holds it
    claim = tmp_path / "store" / ".cache" / "tokenized" / "k.claim"
    claim.write_text('{"token": "dead", "expires": 1}')  # a holder that died long ago
    with b.claim_tokenized("k") as mine_b:
        assert mine_b
    assert not claim.exists()


def _rank(rank: int, port: int, tmp: str, data: str) -> None:
    """One rank of a 2-node job (each rank its own node: LOCAL_RANK 0, its own cache)."""
    import json as _json

    import torch.distributed as dist

    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        LOCAL_RANK="0",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        HF_HUB_OFFLINE="1",
    )
    dist.init_process_group("gloo", rank=rank, world_size=2)
    tok = build_tokenizer(ModelConfig(name_or_path=MINILM, task="causal-lm"))
    builds: list[int] = []
    real = data_mod._tokenize

    def counting(*args: Any, **kwargs: Any) -> Any:
        builds.append(1)
        return real(*args, **kwargs)

    data_mod._tokenize = counting
    node = _node(Path(tmp), f"node-{rank}")
    ds = _load(Path(tmp), node, Path(data), tok, max_length=16)
    rows = [[int(t) for t in r] for r in ds["input_ids"]]
    result = {"builds": len(builds), "rows": rows, "fetched": node.cache.fetched_bytes}
    Path(tmp, f"rank-{rank}.json").write_text(_json.dumps(result))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown under a live gloo group (see the strategies harness)


def test_two_nodes_build_once_and_each_fetches_its_copy(tmp_path: Path) -> None:
    """Global rank 0 builds and publishes; the other node's local rank 0 does not tokenise:
    after the barrier it fetches the store's copy through its own node cache."""
    import torch.multiprocessing as mp
    from tc_helpers import free_port

    data = _corpus(tmp_path / "corpus.txt")
    mp.spawn(_rank, args=(free_port(), str(tmp_path), str(data)), nprocs=2, join=True)
    r0, r1 = (json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in (0, 1))
    assert (r0["builds"], r1["builds"]) == (1, 0)
    assert r0["rows"] == r1["rows"]
    assert r0["fetched"] == 0 and r1["fetched"] > 0  # rank 0's copy adopted, node 1 fetched
