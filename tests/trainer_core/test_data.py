"""Data paths per task and format, collators, the tokenisation cache and the batch order."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from tc_helpers import MINILM

from trainer_core import data as data_mod
from trainer_core.config import DataConfig, DataSource, ModelConfig
from trainer_core.data import (
    BatchOrder,
    CausalLMCollator,
    eval_batches,
    load_tokenized,
    make_collator,
)
from trainer_core.model import build_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(ModelConfig(name_or_path=MINILM, task="causal-lm"))


def _load(tmp_path: Path, source: DataSource, task: str, tok, **cfg):
    if task == "sequence-classification":
        cfg.setdefault("label_field", "label")
    dc = DataConfig(train=source, **cfg)
    return load_tokenized(source, dc, task=task, tokenizer=tok, cache_root=tmp_path / "cache")


def test_tsv_text_pair_sequence_classification(tmp_path: Path, tok) -> None:
    path = tmp_path / "pairs.tsv"
    path.write_text('a\tb\tlabel\nhe said "hi\tit rains\t1\nno\tyes it is\t0\n')
    ds = _load(
        tmp_path,
        DataSource(path=str(path), delimiter="\t"),
        "sequence-classification",
        tok,
        text_field="a",
        text_pair_field="b",
    )
    assert ds["labels"] == [1, 0]
    first = tok.decode(ds[0]["input_ids"])
    assert first == '[CLS] he said " hi [SEP] it rains [SEP]'  # bare quote kept (QUOTE_NONE)
    batch = make_collator("sequence-classification", tok, seed=0)(data_mod_rows(ds))
    assert batch["input_ids"].shape[0] == 2 and batch["labels"].tolist() == [1, 0]
    assert (batch["attention_mask"].sum(1) == torch.tensor([len(r) for r in ds["input_ids"]])).all()


def data_mod_rows(ds):
    return [ds[i] for i in range(len(ds))]


def test_jsonl_token_classification_aligns_labels(tmp_path: Path, tok) -> None:
    path = tmp_path / "ner.jsonl"
    rows = [{"tokens": ["Huggingface", "is", "in", "Brooklyn"], "tags": [1, 0, 0, 2]}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    ds = _load(
        tmp_path,
        DataSource(path=str(path)),
        "token-classification",
        tok,
        text_field="tokens",
        label_field="tags",
    )
    ids, labels = ds[0]["input_ids"], ds[0]["labels"]
    pieces = tok.convert_ids_to_tokens(ids)
    assert pieces[0] == "[CLS]" and labels[0] == -100 and labels[-1] == -100
    # First sub-token of each word carries the word's label, continuations -100.
    firsts = [(p, lab) for p, lab in zip(pieces, labels, strict=True) if lab != -100]
    assert [lab for _, lab in firsts] == [1, 0, 0, 2]
    assert sum(1 for p in pieces if p.startswith("##")) > 0  # Huggingface splits
    batch = make_collator("token-classification", tok, seed=0)(data_mod_rows(ds) * 2)
    assert batch["labels"].shape == batch["input_ids"].shape


def test_parquet_masked_lm_collator_is_seeded(tmp_path: Path, tok) -> None:
    path = tmp_path / "t.parquet"
    pd.DataFrame({"text": ["the cat sat on the mat and looked around the room"] * 8}).to_parquet(
        path
    )
    ds = _load(tmp_path, DataSource(path=str(path)), "masked-lm", tok, max_length=16)
    rows = data_mod_rows(ds)
    a = make_collator("masked-lm", tok, seed=3)(rows)
    b = make_collator("masked-lm", tok, seed=3)(rows)
    c = make_collator("masked-lm", tok, seed=4)(rows)
    assert torch.equal(a["labels"], b["labels"]) and torch.equal(a["input_ids"], b["input_ids"])
    assert not torch.equal(a["labels"], c["labels"])
    masked = a["labels"] != -100
    assert (
        masked.any()
        and (
            a["labels"][masked] == torch.tensor(rows[0]["input_ids"] * 8).view(8, -1)[masked]
        ).all()
    )


def test_text_causal_packing_and_padding_labels(tmp_path: Path, tok) -> None:
    path = tmp_path / "t.txt"
    path.write_text("one two three\n\nfour five six seven eight\nnine\n" * 5)
    packed = _load(
        tmp_path, DataSource(path=str(path)), "causal-lm", tok, max_length=8, packing=True
    )
    assert len(packed) > 0 and all(len(r) == 8 for r in packed["input_ids"])
    plain = _load(tmp_path, DataSource(path=str(path)), "causal-lm", tok, max_length=8)
    assert len(plain) == 15  # blank lines dropped
    batch = CausalLMCollator(tok)([plain[0], plain[1]])
    pad = batch["attention_mask"] == 0
    assert pad.any() and (batch["labels"][pad] == -100).all()
    assert torch.equal(batch["labels"][~pad], batch["input_ids"][~pad])


def test_tokenisation_cache_hit_on_restart(tmp_path: Path, tok, monkeypatch) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,label\ngood movie,1\nbad movie,0\n")
    source = DataSource(path=str(path))
    first = _load(tmp_path, source, "sequence-classification", tok)

    def boom(*args, **kwargs):
        raise AssertionError("re-tokenised despite the cache")

    monkeypatch.setattr(data_mod, "_tokenize", boom)
    again = _load(tmp_path, source, "sequence-classification", tok)
    assert again["input_ids"] == first["input_ids"]
    # A different max_length is a different fingerprint: tokenises again.
    with pytest.raises(AssertionError, match="re-tokenised"):
        _load(tmp_path, source, "sequence-classification", tok, max_length=4)


def test_a_racing_writer_keeps_the_published_cache(tmp_path: Path, tok) -> None:
    """Two jobs sharing one cache may tokenise the same data at once: whoever renames second
    finds the entry published, keeps it and drops its own copy, and both load the rows."""
    path = tmp_path / "d.csv"
    path.write_text("text,label\ngood movie,1\nbad movie,0\n")
    source = DataSource(path=str(path))
    first = _load(tmp_path, source, "sequence-classification", tok)
    (entry,) = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    loser = entry.with_name(entry.name + ".tmp-other")
    first.save_to_disk(str(loser))
    data_mod._publish(loser, entry)
    assert not loser.exists()
    entries = (tmp_path / "cache").iterdir()
    assert sorted(p.name for p in entries if not p.name.startswith(".")) == [entry.name]
    assert _load(tmp_path, source, "sequence-classification", tok)["labels"] == [1, 0]


def test_tokenising_does_not_pickle_the_functions(tmp_path: Path, tok, monkeypatch) -> None:
    """Our cache key names each step, so ``datasets`` never dill-hashes the closures (slow,
    and it prints their bytecode into Ray workers' logs)."""
    import types

    import datasets.arrow_dataset
    import datasets.fingerprint

    real = datasets.fingerprint.update_fingerprint

    def no_function_hashing(fingerprint, transform, transform_args):
        for value in transform_args.values():
            if isinstance(value, types.FunctionType | functools.partial):
                raise AssertionError(f"datasets hashed {value} to fingerprint a step")
        return real(fingerprint, transform, transform_args)

    for module in (datasets.fingerprint, datasets.arrow_dataset):
        monkeypatch.setattr(module, "update_fingerprint", no_function_hashing)
    path = tmp_path / "t.txt"
    path.write_text("one line of text\n\nanother line\n")
    ds = _load(tmp_path, DataSource(path=str(path), format="text"), "causal-lm", tok)
    assert len(ds) == 2


def _flat(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


def test_batch_order_is_deterministic_sharded_and_resumable() -> None:
    single = BatchOrder(20, batch_size=4, seed=1)
    assert single.epoch(0) == BatchOrder(20, batch_size=4, seed=1).epoch(0)
    assert single.epoch(0) != single.epoch(1)
    assert sorted(_flat(single.epoch(0))) == list(range(20))
    ranks = [BatchOrder(21, batch_size=2, seed=1, dp_rank=r, dp_size=2) for r in range(2)]
    e0, e1 = ranks[0].epoch(0), ranks[1].epoch(0)
    assert len(e0) == len(e1) == len(ranks[0]) == 5
    assert not set(_flat(e0)) & set(_flat(e1))  # disjoint shards
    # Skipping to (epoch 1, batch 3) yields exactly the tail of the full stream.
    full = list(single.iterate(0, 0, 3))
    assert list(single.iterate(1, 3, 3)) == full[len(single) + 3 :]


def test_group_by_length_batches_similar_lengths() -> None:
    lengths = np.random.default_rng(0).integers(1, 100, size=400)
    grouped = BatchOrder(400, batch_size=8, seed=0, lengths=lengths).epoch(0)
    plain = BatchOrder(400, batch_size=8, seed=0).epoch(0)
    pad = lambda batches: sum(max(lengths[b]) * len(b) - sum(lengths[b]) for b in batches)  # noqa: E731
    assert pad(grouped) < pad(plain) / 3
    assert sorted(_flat(grouped)) == list(range(400))


def test_eval_batches_equal_count_per_rank() -> None:
    shards = [list(eval_batches(5, batch_size=2, dp_rank=r, dp_size=2)) for r in range(2)]
    assert len(shards[0]) == len(shards[1]) == 2
    real = sorted(i for shard in shards for ix, ok in shard if ok for i in ix)
    assert real == [0, 1, 2, 3, 4]
