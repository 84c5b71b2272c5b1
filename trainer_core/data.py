"""Datasets, tokenisation (cached on disk), collators and the resumable batch order.

Contract:
- ``load_tokenized(source, cfg, task, tokenizer, cache_root)`` → a ``datasets.Dataset`` whose
  rows are model inputs (``input_ids``, ``attention_mask``, ... and ``labels`` where the task
  has per-example labels). The result is saved under ``cache_root/<fingerprint>``; the
  fingerprint covers the data (path + size + mtime, or hub id/config/split), the tokenizer
  (its serialised vocabulary), the task, fields and ``max_length``, so a restart loads it
  instead of re-tokenising and any change re-tokenises.
- ``make_collator(task, tokenizer, seed)``: the task's collator (``trainer_core.tasks``):
  dynamic padding per batch; masked LM masking draws from a seeded generator whose state the
  checkpoint saves.
- ``BatchOrder``: which example indices form each micro-batch of each epoch on this rank. A
  pure function of (seed, epoch, dp_rank, dp_size): shuffled per epoch with ``seed + epoch``,
  then strided over data-parallel ranks, so a resume can start at (epoch, batch) without
  touching the skipped batches.

What a task's rows become (columns, labels, packing) is the task's own ``encode``, in its
module under ``trainer_core/tasks``; this module reads, caches and orders them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow.compute as pc
import torch
import torch.distributed as dist
from transformers import PreTrainedTokenizerBase

from shunter.jobspec import DataSource as SpecSource
from trainer_core.config import DataConfig, DataSource
from trainer_core.formats import read_local
from trainer_core.hub import load_hub_dataset
from trainer_core.tasks import task_ops
from trainer_core.tasks.base import Collator, require_columns
from trainer_core.tasks.causal_lm import CausalLMCollator

__all__ = [
    "BatchOrder",
    "CausalLMCollator",  # re-exported from trainer_core.tasks.causal_lm
    "eval_batches",
    "load_tokenized",
    "make_collator",
    "row_lengths",
]

_CACHE_VERSION = 1  # bump when tokenisation logic changes, so old caches are not reused


# ---------------------------------------------------------------- loading + tokenising


def load_tokenized(
    source: DataSource,
    cfg: DataConfig,
    *,
    task: str,
    tokenizer: PreTrainedTokenizerBase,
    cache_root: Path,
) -> datasets.Dataset:
    """Tokenised dataset for ``source``, from the on-disk cache when it is there.

    Under torch.distributed, rank 0 tokenises and writes the cache while the other ranks wait
    at a barrier, then they load what rank 0 wrote. No shared filesystem is assumed: on a
    node that does not see rank 0's copy (``cache_root`` is node-local, as the staging of
    object-storage jobs is), the node's local rank 0 tokenises its own while the others wait
    at a second barrier (tokenising is deterministic: every copy is the same). The cache key
    covers the data file (path, size, mtime), tokenizer and settings, so several jobs may
    share one ``cache_root``; two writing the same entry at once both succeed, one wins.
    """
    key = _fingerprint(source, cfg, task, tokenizer)
    cache_dir = cache_root / key

    def build() -> None:
        raw = _load_raw(source, _required_fields(cfg, task))
        tokenized = _tokenize(raw, cfg, task, tokenizer, key)
        tmp = cache_dir.with_name(f"{cache_dir.name}.tmp-{uuid.uuid4().hex}")
        tokenized.save_to_disk(str(tmp))
        _publish(tmp, cache_dir)

    def missing() -> bool:
        return not (cache_dir / "dataset_info.json").exists()

    if not (dist.is_available() and dist.is_initialized()):
        if missing():
            build()
        return datasets.load_from_disk(str(cache_dir))
    if dist.get_rank() == 0 and missing():
        build()
    dist.barrier()  # rank 0's copy is published
    if missing() and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        build()  # this node cannot see rank 0's disk: its own copy
    dist.barrier()
    if missing():
        raise RuntimeError(f"tokenisation cache {cache_dir} missing after this node wrote it")
    return datasets.load_from_disk(str(cache_dir))


def _publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final`` (atomic: a crash never leaves a half cache). When another
    writer published ``final`` first, its copy is as good as ours: keep it, drop ours."""
    try:
        tmp.rename(final)
    except OSError:
        if not (final / "dataset_info.json").exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def _load_raw(source: DataSource, fields: list[str]) -> datasets.Dataset:
    """The raw rows: a hub dataset from the node's snapshot, or a local file/folder read by
    ``formats.read_local`` (errors name the file and line). ``fields``: columns that must be
    present and non-null."""
    if source.hub is not None:
        return load_hub_dataset(source)
    assert source.path is not None
    fmt, delimiter = source.format, source.delimiter
    if fmt is None:  # a hand-written torchrun spec may leave it to the suffix, as the spec does
        inferred = SpecSource.model_validate({"path": source.path})
        fmt, delimiter = inferred.format, delimiter or inferred.delimiter
    return read_local(source.path, str(fmt), delimiter=delimiter, fields=fields)


def _required_fields(cfg: DataConfig, task: str) -> list[str]:
    """Columns every row needs (non-null) as the task declares them (``required_fields``);
    tasks that declare none check their own columns as they encode."""
    named = [getattr(cfg, name) for name in task_ops(task).required_fields]
    return [f for f in named if f]


def _tokenize(
    raw: datasets.Dataset, cfg: DataConfig, task: str, tok: PreTrainedTokenizerBase, key: str
) -> datasets.Dataset:
    """The task's ``encode`` over every row (language-model tasks first drop empty texts).
    ``key`` (our cache key) names the results, so ``datasets`` need not fingerprint the
    functions by pickling them with dill (slow, and it prints bytecode inside Ray workers)."""
    ops = task_ops(task)
    if ops.filter_empty:
        text = cfg.text_field
        require_columns(raw.column_names, text_field=text)
        raw = raw.filter(
            lambda row: bool(row[text] and str(row[text]).strip()), new_fingerprint=f"{key}-f"
        )
    return raw.map(
        lambda rows: ops.encode(rows, cfg, tok),
        batched=True,
        remove_columns=raw.column_names,
        desc="tokenising",
        new_fingerprint=f"{key}-t",
    )


def _fingerprint(
    source: DataSource, cfg: DataConfig, task: str, tok: PreTrainedTokenizerBase
) -> str:
    if source.path is not None:
        st = Path(source.path).stat()
        data_id: Any = [str(Path(source.path).resolve()), st.st_size, st.st_mtime_ns]
    else:
        data_id = [source.hub, source.config, source.split]
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is not None:
        # Calling the tokenizer with truncation/padding mutates those two sections of its
        # serialised form; they say nothing about the vocabulary, so leave them out.
        tok_state = json.loads(backend.to_str())
        tok_state.pop("truncation", None)
        tok_state.pop("padding", None)
        tok_id = json.dumps(tok_state, sort_keys=True)
    else:
        tok_id = f"{tok.name_or_path}:{len(tok)}"
    key = json.dumps(
        [
            _CACHE_VERSION,
            data_id,
            source.format,
            source.delimiter,
            task,
            cfg.text_field,
            cfg.text_pair_field,
            cfg.label_field,
            cfg.target_field,
            cfg.messages_field,
            cfg.max_length,
            cfg.packing,
            hashlib.sha256(tok_id.encode()).hexdigest(),
        ],
        default=str,
    )
    return hashlib.sha256(key.encode()).hexdigest()[:24]


# ---------------------------------------------------------------- collators


def make_collator(
    task: str, tokenizer: PreTrainedTokenizerBase, *, seed: int, model_config: Any = None
) -> Collator:
    """The dynamic-padding collator of ``task``; one that draws (masked LM) is seeded.
    ``model_config`` (the model's ``PretrainedConfig``): what some tasks' collators read
    (seq2seq's decoder start token, multi-label's label count)."""
    return task_ops(task).collator(tokenizer, model_config, seed)


# ---------------------------------------------------------------- batch order


def row_lengths(ds: datasets.Dataset) -> np.ndarray:
    """Token count of every row (``input_ids`` lengths) as int64, read from Arrow.

    ``ds["input_ids"]`` would decode all rows into Python lists (about 1 s of CPU for
    SST-2's 67k rows); the Arrow list-length kernel does it in milliseconds.
    """
    column = ds.with_format("arrow")["input_ids"]
    return np.asarray(pc.list_value_length(column).to_numpy(), dtype=np.int64)


class BatchOrder:
    """Deterministic, resumable, data-parallel batch order over ``num_examples`` rows.

    Each epoch: permute with ``seed + epoch``; drop the last ``n % dp_size`` indices so every
    rank gets the same number of batches (a collective per step must never wait on a rank
    that ran out); take every ``dp_size``-th index from ``dp_rank``; cut into batches (the last
    may be short). With ``lengths`` given (group_by_length), each run of ``50 x batch_size``
    shuffled indices is sorted by length before cutting, so batches pad less, and the batches
    are then shuffled again so long ones are not always first.
    """

    def __init__(
        self,
        num_examples: int,
        *,
        batch_size: int,
        seed: int,
        dp_rank: int = 0,
        dp_size: int = 1,
        lengths: np.ndarray | None = None,
    ) -> None:
        if num_examples < dp_size:
            raise ValueError(f"{num_examples} training examples cannot feed {dp_size} ranks")
        self.num_examples, self.batch_size, self.seed = num_examples, batch_size, seed
        self.dp_rank, self.dp_size, self.lengths = dp_rank, dp_size, lengths

    def __len__(self) -> int:
        per_rank = self.num_examples // self.dp_size
        return -(-per_rank // self.batch_size)

    def epoch(self, epoch: int) -> list[list[int]]:
        gen = torch.Generator().manual_seed(self.seed + epoch)
        perm = torch.randperm(self.num_examples, generator=gen).numpy()
        usable = self.num_examples - self.num_examples % self.dp_size
        if self.lengths is not None:
            window = 50 * self.batch_size * self.dp_size
            perm = np.concatenate(
                [
                    chunk[np.argsort(-self.lengths[chunk], kind="stable")]
                    for chunk in np.split(perm[:usable], range(window, usable, window))
                ]
            )
        mine = perm[self.dp_rank : usable : self.dp_size].tolist()
        batches = [mine[i : i + self.batch_size] for i in range(0, len(mine), self.batch_size)]
        if self.lengths is not None:
            # Same permutation on every rank (same generator state), so ranks stay aligned.
            order = torch.randperm(len(batches), generator=gen).tolist()
            batches = [batches[i] for i in order]
        return batches

    def iterate(
        self, start_epoch: int, start_batch: int, num_epochs: int | None
    ) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, batch index, indices) from the given position; endless if no epoch cap."""
        epoch, first = start_epoch, start_batch
        while num_epochs is None or epoch < num_epochs:
            for b, indices in enumerate(self.epoch(epoch)[first:], start=first):
                yield epoch, b, indices
            epoch, first = epoch + 1, 0


def eval_batches(
    num_examples: int, *, batch_size: int, dp_rank: int, dp_size: int
) -> Iterator[tuple[list[int], bool]]:
    """This rank's eval batches in order, as (indices, real).

    Every rank yields the same number of batches (sharded models need every rank in every
    forward); a rank whose shard ran out repeats index 0 with ``real=False`` and the loop
    gives that batch zero weight.
    """
    mine = list(range(dp_rank, num_examples, dp_size))
    per_rank = -(-num_examples // dp_size)
    for b in range(-(-per_rank // batch_size)):
        indices = mine[b * batch_size : (b + 1) * batch_size]
        yield (indices, True) if indices else ([0], False)
