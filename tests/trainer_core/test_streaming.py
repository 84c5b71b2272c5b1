"""Streaming datasets (``trainer_core.streaming``): a dataset larger than the node cache is
tokenised into shards in the store and read shard by shard under the cache's byte cap, in an
order that is a pure function of (seed, epoch, dp_rank, dp_size), so a run stopped mid-epoch
and resumed from its checkpoint on another node logs the same loss at every step.

The store is a local directory; each "node" has its own cache directory (private disks)."""

from __future__ import annotations

import os
import shutil
from itertools import chain
from pathlib import Path
from typing import Any

import pytest
from tc_helpers import MINILM, losses, tiny_llama_spec, write_corpus

import storage
from storage.manifest import publish_object
from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.config import DataConfig, DataSource, ModelConfig
from trainer_core.data import load_tokenized
from trainer_core.model import build_tokenizer
from trainer_core.streaming import (
    SHARD_BYTES_ENV,
    STREAM_ENV,
    WINDOW_ENV,
    ShardedDataset,
    StreamOrder,
    load_data,
)
from worker.inputs import NodeInputs, tokenized_root
from worker.object_cache import DataCorrupt, ObjectCache

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class WatchedCache(ObjectCache):
    """An object cache that records the most bytes it ever held (after every fetch, the only
    time it grows) and every key it fetched."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_bytes = 0
        self.keys: list[str] = []

    def get(self, key: str, source: Any) -> Path:
        out = super().get(key, source)
        self.keys.append(key)
        self.max_bytes = max(self.max_bytes, sum(self.usage().values()))
        return out


# ---------------------------------------------------------------- the order


SHARDS = [5, 7, 5, 6, 3, 8, 4, 5, 6, 2]


def test_order_is_a_pure_function_of_seed_epoch_rank() -> None:
    a = StreamOrder(SHARDS, window=3, batch_size=4, seed=11, dp_rank=1, dp_size=2)
    b = StreamOrder(SHARDS, window=3, batch_size=4, seed=11, dp_rank=1, dp_size=2)
    assert a.epoch(0) == b.epoch(0) and a.epoch(3) == b.epoch(3)
    assert a.epoch(0) != a.epoch(1)  # reshuffled each epoch
    other = StreamOrder(SHARDS, window=3, batch_size=4, seed=12, dp_rank=1, dp_size=2)
    assert other.epoch(0) != a.epoch(0)


def test_ranks_split_the_epoch_and_windows_stay_local() -> None:
    n = sum(SHARDS)
    ranks = [
        StreamOrder(SHARDS, window=3, batch_size=4, seed=5, dp_rank=r, dp_size=3) for r in (0, 1, 2)
    ]
    seen = [list(chain.from_iterable(order.epoch(2))) for order in ranks]
    assert len({len(s) for s in seen}) == 1  # every rank the same number of samples
    flat = list(chain.from_iterable(seen))
    assert len(flat) == len(set(flat)) == n - n % 3
    assert len({len(order) for order in ranks}) == 1
    # The epoch's sequence is windows of 3 shards in the epoch's shard order.
    order = ranks[0]
    starts = [sum(SHARDS[:s]) for s in range(len(SHARDS) + 1)]
    shard_of = {i: s for s in range(len(SHARDS)) for i in range(starts[s], starts[s + 1])}
    seq, shards = order.samples(2).tolist(), order.shards(2)
    pos = 0
    for w in range(0, len(shards), 3):
        members = shards[w : w + 3]
        size = sum(SHARDS[s] for s in members)
        assert {shard_of[i] for i in seq[pos : pos + size]} == set(members)
        pos += size


def test_resume_starts_at_exactly_the_next_batch() -> None:
    order = StreamOrder(SHARDS, window=2, batch_size=3, seed=3, dp_rank=0, dp_size=2)
    straight = list(order.iterate(0, 0, 3))
    at = next(i for i, (e, b, _) in enumerate(straight) if (e, b) == (1, 4))
    assert list(order.iterate(1, 4, 3)) == straight[at:]


# ---------------------------------------------------------------- shards


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_tokenizer(ModelConfig(name_or_path=MINILM, task="causal-lm"))


def test_shards_hold_the_rows_tokenising_whole_gives(
    tmp_path: Path, tok: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    corpus = write_corpus(tmp_path / "corpus.txt", n=300)
    source = DataSource(path=str(corpus))
    cfg = DataConfig(train=source, max_length=16)
    whole = load_tokenized(
        source, cfg, task="causal-lm", tokenizer=tok, cache_root=tmp_path / "whole"
    )
    monkeypatch.setenv(STREAM_ENV, "on")
    monkeypatch.setenv(SHARD_BYTES_ENV, "512")
    ds = load_data(source, cfg, task="causal-lm", tokenizer=tok, cache_root=tmp_path / "s")
    assert isinstance(ds, ShardedDataset)
    assert len(ds.shard_rows) > 5 and len(ds) == len(whole)
    rows = ds[list(range(len(ds)))]
    assert rows["input_ids"] == whole["input_ids"]
    assert rows["attention_mask"] == whole["attention_mask"]
    assert ds.max_open <= 4  # without a plan: a few shards at a time


# ---------------------------------------------------------------- training under a cap


CAP = 16 * 1024  # bytes of node cache: a fifth of the tokenised shards (~83 KB)


def _stored_corpus(tmp_path: Path, store: str) -> dict[str, Any]:
    src = tmp_path / "upload"
    src.mkdir()
    write_corpus(src / "train.txt", n=480)
    digest, _ = publish_object(src, store)
    return {
        "ds-stream": {
            "uri": storage.join(store, storage.object_dir(digest)),
            "digest": digest,
            "kind": "dataset",
            "format": "text",
            "file": "train.txt",
        }
    }


def _run(
    tmp_path: Path, store: str, inputs: dict[str, Any], out: Path, node: str
) -> tuple[WatchedCache, Any]:
    cache = WatchedCache(tmp_path / node, limit_bytes=CAP)
    shared = NodeInputs(cache, tokenized=tokenized_root(store), settle_s=0.05)
    spec = tiny_llama_spec(
        out,
        tmp_path / "unused.txt",
        max_steps=30,
        save_strategy="steps",
        save_steps=14,
        per_device_train_batch_size=4,
    )
    spec["model"]["config_overrides"]["attention_dropout"] = 0.1
    spec["data"]["train"] = shared.dataset("ds-stream", inputs["ds-stream"])
    result = train(TrainConfig.from_spec(spec, shared_data=shared), JsonlReporter(out))
    return cache, result


def test_a_stream_trains_under_the_cap_and_resumes_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SHARD_BYTES_ENV, "1024")
    monkeypatch.setenv(WINDOW_ENV, "2")
    monkeypatch.delenv(STREAM_ENV, raising=False)  # auto: the corpus is > a quarter of CAP
    store = str(tmp_path / "store")
    inputs = _stored_corpus(tmp_path, store)
    straight = tmp_path / "straight"
    cache, _ = _run(tmp_path, store, inputs, straight, "node-a")
    shards = [k for k in cache.keys if "shard-" in k]
    assert shards, cache.keys  # read as shards, not one tokenised object
    assert not any(k.startswith("obj-") for k in cache.keys)  # the raw file never cached whole
    tokenized = next(p for p in (Path(store) / ".cache" / "tokenized").iterdir() if p.is_dir())
    shard_bytes = sum(p.stat().st_size for p in tokenized.glob("shard-*.arrow"))
    assert shard_bytes > 2 * CAP  # the data does not fit the cache...
    assert 0 < cache.max_bytes <= CAP  # ...and the cache never went past its cap
    # Stopped after step 14 (its checkpoint, mid-epoch: 120 batches an epoch), resumed on
    # another node with an empty cache.
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(straight / "checkpoint-14", resumed / "checkpoint-14")
    other, _ = _run(tmp_path, store, inputs, resumed, "node-b")
    a, b = losses(straight), losses(resumed)
    assert sorted(a) == list(range(1, 31)) and sorted(b) == list(range(15, 31))
    for step in b:
        assert a[step] == b[step], (step, a[step], b[step])
    assert 0 < other.max_bytes <= CAP
    # The resume skipped steps 1..14 without reading their shards: it fetched fewer.
    assert len(set(other.keys)) <= len(set(cache.keys))


def test_a_corrupt_shard_names_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tok: Any
) -> None:
    monkeypatch.setenv(STREAM_ENV, "on")
    monkeypatch.setenv(SHARD_BYTES_ENV, "1024")
    store = str(tmp_path / "store")
    inputs = _stored_corpus(tmp_path, store)
    shared = NodeInputs(ObjectCache(tmp_path / "n1"), tokenized=tokenized_root(store))
    source = DataSource(**shared.dataset("ds-stream", inputs["ds-stream"]))
    cfg = DataConfig(train=source, max_length=16)
    ds = load_data(
        source, cfg, task="causal-lm", tokenizer=tok, cache_root=tmp_path / "c", shared=shared
    )
    assert isinstance(ds, ShardedDataset)
    tokenized = next(p for p in (Path(store) / ".cache" / "tokenized").iterdir() if p.is_dir())
    shard = tokenized / "shard-00001.arrow"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    fresh = NodeInputs(ObjectCache(tmp_path / "n2"), tokenized=tokenized_root(store))
    source = DataSource(**fresh.dataset("ds-stream", inputs["ds-stream"]))
    again = load_data(
        source, cfg, task="causal-lm", tokenizer=tok, cache_root=tmp_path / "c2", shared=fresh
    )
    with pytest.raises(DataCorrupt, match="shard-00001"):
        again[list(range(again.shard_rows[0], again.shard_rows[0] + 2))]
