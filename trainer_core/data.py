"""Datasets, tokenisation (cached on disk), collators and the resumable batch order.

Contract:
- ``load_tokenized(source, cfg, task, tokenizer, cache_root)`` → a ``datasets.Dataset`` whose
  rows are model inputs (``input_ids``, ``attention_mask``, ... and ``labels`` where the task
  has per-example labels). The result is saved under ``cache_root/<fingerprint>``, or, on
  object storage, once for the whole cluster in the store (``SharedData``); the fingerprint
  covers the data's content (SHA-256 of the bytes, or hub id/config/split), the tokenizer
  (its serialised vocabulary), the task, fields, ``max_length`` and packing, so a restart or
  another job on the same bytes loads it instead of re-tokenising and any change
  re-tokenises.
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
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NotRequired, TypedDict

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
from trainer_core.shared_data import SharedData
from trainer_core.tasks import task_ops
from trainer_core.tasks.base import Collator, require_columns
from trainer_core.tasks.causal_lm import CausalLMCollator

__all__ = [
    "BatchOrder",
    "CausalLMCollator",  # re-exported from trainer_core.tasks.causal_lm
    "LoadArgs",
    "SharedData",
    "content_hash",
    "eval_batches",
    "fingerprint",
    "load_tokenized",
    "make_collator",
    "row_lengths",
]

_CACHE_VERSION = 2  # bump when tokenisation logic changes, so old caches are not reused


class LoadArgs(TypedDict):
    """``load_tokenized``'s keyword arguments, for the loaders that pass them on to it
    (``streaming.load_data``)."""

    task: str
    tokenizer: PreTrainedTokenizerBase
    cache_root: Path
    shared: NotRequired[SharedData | None]
    poll_s: NotRequired[float]


# ---------------------------------------------------------------- loading + tokenising


def load_tokenized(
    source: DataSource,
    cfg: DataConfig,
    *,
    task: str,
    tokenizer: PreTrainedTokenizerBase,
    cache_root: Path,
    shared: SharedData | None = None,
    poll_s: float = 1.0,
) -> datasets.Dataset:
    """Tokenised dataset for ``source``, from a cache when one holds it.

    The key (``fingerprint``) covers the data's content (its SHA-256, or the hub id, config
    and split), the tokenizer (its serialised vocabulary), the task, fields, ``max_length``
    and packing, so any job with the same key may reuse it and any change re-tokenises.

    ``shared`` (object storage, no shared disk): the store holds one copy per key for the
    whole cluster. Rank 0 fetches it, or, when absent, claims the key, tokenises and
    publishes it (``_obtain``: a second job racing on the same key waits for the claim
    holder's copy instead of building its own); after a barrier every rank fetches it through
    its node's cache (one download per node, the others wait on its lock).

    Without ``shared`` (a shared filesystem, torchrun): ``cache_root/<key>``. Under
    torch.distributed, rank 0 tokenises and writes it while the other ranks wait at a
    barrier, then they load what rank 0 wrote. On a node that does not see rank 0's copy
    (``cache_root`` node-local), the node's local rank 0 tokenises its own while the others
    wait at a second barrier (tokenising is deterministic: every copy is the same). Two jobs
    writing the same entry at once both succeed, one wins.
    """
    key = fingerprint(source, cfg, task, tokenizer, shared=shared, cache_root=cache_root)
    cache_dir = cache_root / key

    def build(into: Path) -> Path:
        if shared is not None and source.path is not None:
            shared.materialize(source.path)
        raw = _load_raw(source, _required_fields(cfg, task))
        tokenized = _tokenize(raw, cfg, task, tokenizer, key)
        tmp = into.with_name(f"{into.name}.tmp-{uuid.uuid4().hex}")
        tokenized.save_to_disk(str(tmp))
        return tmp

    distributed = dist.is_available() and dist.is_initialized()
    if shared is not None:
        if not distributed:
            return datasets.load_from_disk(str(_obtain(shared, key, build, cache_dir, poll_s)))
        if dist.get_rank() == 0:
            _obtain(shared, key, build, cache_dir, poll_s)
        dist.barrier()  # the store holds it
        found = shared.fetch_tokenized(key)
        if found is None:
            raise RuntimeError(f"tokenised dataset {key} missing from the store after rank 0")
        return datasets.load_from_disk(str(found))

    def missing() -> bool:
        return not (cache_dir / "dataset_info.json").exists()

    def build_here() -> None:
        _publish(build(cache_dir), cache_dir)

    if not distributed:
        if missing():
            build_here()
        return datasets.load_from_disk(str(cache_dir))
    if dist.get_rank() == 0 and missing():
        build_here()
    dist.barrier()  # rank 0's copy is published
    if missing() and int(os.environ.get("LOCAL_RANK", "0")) == 0:
        build_here()  # this node cannot see rank 0's disk: its own copy
    dist.barrier()
    if missing():
        raise RuntimeError(f"tokenisation cache {cache_dir} missing after this node wrote it")
    return datasets.load_from_disk(str(cache_dir))


def _obtain(
    shared: SharedData,
    key: str,
    build: Callable[[Path], Path],
    into: Path,
    poll_s: float,
) -> Path:
    """The tokenised dataset ``key`` on this node: from the store, or built here and published
    when this process wins the claim; while another holds it, wait for its copy (a claim
    whose holder died lapses, and the next waiter takes it over)."""
    while True:
        found = shared.fetch_tokenized(key)
        if found is not None:
            return found
        with shared.claim_tokenized(key) as mine:
            if mine:
                found = shared.fetch_tokenized(key)  # published between our look and our claim
                if found is not None:
                    return found
                into.parent.mkdir(parents=True, exist_ok=True)
                built = build(into)
                try:
                    return shared.publish_tokenized(key, built)
                finally:
                    shutil.rmtree(built, ignore_errors=True)
        time.sleep(poll_s)


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
            lambda row: bool(row[text] and str(row[text]).strip()), new_fingerprint=f"{key[:40]}-f"
        )
    return raw.map(
        lambda rows: ops.encode(rows, cfg, tok),
        batched=True,
        remove_columns=raw.column_names,
        desc="tokenising",
        new_fingerprint=f"{key[:40]}-t",
    )


def fingerprint(
    source: DataSource,
    cfg: DataConfig,
    task: str,
    tok: PreTrainedTokenizerBase,
    *,
    shared: SharedData | None = None,
    cache_root: Path | None = None,
) -> str:
    """The tokenised dataset's key: SHA-256 over the data's content hash (``shared``'s when it
    knows it, else the bytes', remembered per file under ``cache_root``), the tokenizer, the
    task, its fields, ``max_length``, packing and ``_CACHE_VERSION``."""
    if source.path is not None:
        known = shared.content_id(source.path) if shared is not None else None
        data_id: Any = ["sha256", known or content_hash(Path(source.path), cache_root)]
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
    return hashlib.sha256(key.encode()).hexdigest()


def content_hash(path: Path, memo_root: Path | None = None) -> str:
    """SHA-256 of a file's bytes (a folder: of its files' relative names and hashes, sorted).
    With ``memo_root``, remembered per file version (path, size, mtime, inode) so a node
    hashes a file once, not at every job."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file())
        rows = [[p.relative_to(path).as_posix(), content_hash(p, memo_root)] for p in files]
        return hashlib.sha256(json.dumps(rows).encode()).hexdigest()
    st = path.stat()
    version = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino])
    memo = None
    if memo_root is not None:
        memo = memo_root / ".content" / hashlib.sha256(version.encode()).hexdigest()
        try:
            return memo.read_text().strip()
        except FileNotFoundError:
            pass
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    out = digest.hexdigest()
    if memo is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_name(f"{memo.name}.{uuid.uuid4().hex}")
        tmp.write_text(out)
        tmp.replace(memo)
    return out


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

    def samples(self, epoch: int) -> np.ndarray:
        """The epoch's permutation of all rows (before dropping, striding and cutting): what
        ``epoch`` starts from, and an elastic run's row stream (``trainer_core.row_order``)."""
        gen = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.num_examples, generator=gen).numpy()

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
