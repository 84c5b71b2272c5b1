"""Datasets, tokenisation (cached on disk), collators and the resumable batch order.

Contract:
- ``load_tokenized(source, cfg, task, tokenizer, cache_root)`` → a ``datasets.Dataset`` whose
  rows are model inputs (``input_ids``, ``attention_mask``, ... and ``labels`` where the task
  has per-example labels). The result is saved under ``cache_root/<fingerprint>``; the
  fingerprint covers the data (path + size + mtime, or hub id/config/split), the tokenizer
  (its serialised vocabulary), the task, fields and ``max_length``, so a restart loads it
  instead of re-tokenising and any change re-tokenises.
- ``make_collator(task, tokenizer, seed)``: dynamic padding per batch; causal LM labels are the
  inputs with -100 on padding (the model shifts nothing: the loop shifts); masked LM masking
  draws from a seeded generator whose state the checkpoint saves.
- ``BatchOrder``: which example indices form each micro-batch of each epoch on this rank. A
  pure function of (seed, epoch, dp_rank, dp_size): shuffled per epoch with ``seed + epoch``,
  then strided over data-parallel ranks, so a resume can start at (epoch, batch) without
  touching the skipped batches.

Token classification expects ``text_field`` to hold a list of words and ``label_field`` a list
of integer labels per word; the label goes on each word's first sub-token, -100 elsewhere.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow.compute as pc
import torch
import torch.distributed as dist
from transformers import (
    DataCollatorForLanguageModeling,
    DataCollatorForTokenClassification,
    DataCollatorWithPadding,
    PreTrainedTokenizerBase,
)

from shunter.jobspec import DataSource as SpecSource
from trainer_core.config import DataConfig, DataSource
from trainer_core.formats import read_local
from trainer_core.hub import load_hub_dataset
from trainer_core.tasks import TASK_OPS

__all__ = [
    "BatchOrder",
    "CausalLMCollator",
    "eval_batches",
    "load_tokenized",
    "make_collator",
    "row_lengths",
]

_CACHE_VERSION = 1  # bump when tokenisation logic changes, so old caches are not reused
Collator = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]


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
    at a barrier, then they load what rank 0 wrote (a shared filesystem is assumed). The cache
    key covers the data file (path, size, mtime), tokenizer and settings, so several jobs may
    share one ``cache_root``; two writing the same entry at once both succeed, one wins.
    """
    key = _fingerprint(source, cfg, task, tokenizer)
    cache_dir = cache_root / key
    distributed = dist.is_available() and dist.is_initialized()
    is_main = not distributed or dist.get_rank() == 0
    if distributed and not is_main:
        dist.barrier()  # wait for rank 0 to publish the cache
    if not (cache_dir / "dataset_info.json").exists():
        if is_main:
            raw = _load_raw(source, _required_fields(cfg, task))
            tokenized = _tokenize(raw, cfg, task, tokenizer, key)
            tmp = cache_dir.with_name(f"{cache_dir.name}.tmp-{uuid.uuid4().hex}")
            tokenized.save_to_disk(str(tmp))
            _publish(tmp, cache_dir)
        else:
            raise RuntimeError(f"tokenisation cache {cache_dir} missing after rank 0 wrote it")
    if distributed and is_main:
        dist.barrier()
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
    """Columns every row needs, for the original tasks (LM tasks drop empty text rows; the
    newer tasks in ``trainer_core/tasks`` check their own columns)."""
    if task == "sequence-classification":
        named = [cfg.text_field, cfg.text_pair_field, cfg.label_field]
    elif task == "token-classification":
        named = [cfg.text_field, cfg.label_field]
    else:
        named = []
    return [f for f in named if f]


def _tokenize(
    raw: datasets.Dataset, cfg: DataConfig, task: str, tok: PreTrainedTokenizerBase, key: str
) -> datasets.Dataset:
    """``key`` (our cache key) names the results, so ``datasets`` need not fingerprint the
    functions by pickling them with dill (slow, and it prints bytecode inside Ray workers)."""
    text, pair, label = cfg.text_field, cfg.text_pair_field, cfg.label_field
    ops = TASK_OPS.get(task)
    if ops is not None:  # the newer tasks encode themselves (trainer_core/tasks)
        return raw.map(
            lambda rows: ops.encode(rows, cfg, tok),
            batched=True,
            remove_columns=raw.column_names,
            desc="tokenising",
            new_fingerprint=f"{key}-t",
        )
    if text not in raw.column_names:
        raise ValueError(f"data.text_field {text!r} not in the data's columns {raw.column_names}")
    if task in ("causal-lm", "masked-lm"):
        raw = raw.filter(
            lambda row: bool(row[text] and str(row[text]).strip()), new_fingerprint=f"{key}-f"
        )

    def encode(rows: dict[str, list[Any]]) -> dict[str, Any]:
        if task == "sequence-classification":
            out = tok(
                rows[text], rows[pair] if pair else None, truncation=True, max_length=cfg.max_length
            )
            out["labels"] = [int(v) for v in rows[label]]  # type: ignore[index]
            return dict(out)
        if task == "token-classification":
            out = tok(
                rows[text], is_split_into_words=True, truncation=True, max_length=cfg.max_length
            )
            out["labels"] = [
                _align_word_labels(out.word_ids(i), word_labels)
                for i, word_labels in enumerate(rows[label])  # type: ignore[index]
            ]
            return dict(out)
        if task == "masked-lm":
            return dict(
                tok(
                    rows[text],
                    truncation=True,
                    max_length=cfg.max_length,
                    return_special_tokens_mask=True,
                )
            )
        if cfg.packing:
            return _pack(tok(rows[text])["input_ids"], tok.eos_token_id, cfg.max_length)
        return dict(tok(rows[text], truncation=True, max_length=cfg.max_length))

    return raw.map(
        encode,
        batched=True,
        remove_columns=raw.column_names,
        desc="tokenising",
        new_fingerprint=f"{key}-t",
    )


def _align_word_labels(word_ids: list[int | None], word_labels: list[int]) -> list[int]:
    """Label each word's first sub-token; continuation and special tokens get -100."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(-100 if word is None or word == previous else int(word_labels[word]))
        previous = word
    return labels


def _pack(ids: list[list[int]], eos: int | None, block: int) -> dict[str, Any]:
    """Concatenate documents (eos between them) and cut into ``block``-token rows.

    The tail shorter than a block is dropped (as HF's run_clm does) within one map batch.
    """
    flat: list[int] = []
    for doc in ids:
        flat.extend(doc)
        if eos is not None:
            flat.append(eos)
    n = (len(flat) // block) * block
    rows = [flat[i : i + block] for i in range(0, n, block)]
    return {"input_ids": rows, "attention_mask": [[1] * block for _ in rows]}


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


class CausalLMCollator:
    """Pad to the longest row; labels = input_ids with -100 where ``attention_mask`` is 0.

    Masking by the attention mask (not by ``pad_token_id``) keeps real EOS tokens as
    targets when the pad token is the EOS token.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.tokenizer.pad(
            [{"input_ids": r["input_ids"]} for r in rows], return_tensors="pt"
        )
        labels = batch["input_ids"].clone()
        labels[batch["attention_mask"] == 0] = -100
        return {**batch, "labels": labels}


def make_collator(
    task: str, tokenizer: PreTrainedTokenizerBase, *, seed: int, model_config: Any = None
) -> Collator:
    """The dynamic-padding collator for ``task``; masked LM draws from a seeded generator.
    ``model_config`` (the model's ``PretrainedConfig``): what some tasks' collators read
    (seq2seq's decoder start token, multi-label's label count)."""
    ops = TASK_OPS.get(task)
    if ops is not None:
        return ops.collator(tokenizer, model_config)
    if task == "sequence-classification":
        return DataCollatorWithPadding(tokenizer)
    if task == "token-classification":
        return DataCollatorForTokenClassification(tokenizer)
    if task == "masked-lm":
        collator = DataCollatorForLanguageModeling(tokenizer, mlm=True, seed=seed)
        # Create the generator now (HF creates it lazily) so a checkpoint can always save it.
        collator.generator = torch.Generator().manual_seed(seed)
        return collator
    return CausalLMCollator(tokenizer)


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
