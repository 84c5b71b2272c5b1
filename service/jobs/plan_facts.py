"""Facts for a dry run's plan that the spec alone does not hold: parameter counts, train rows.

``plan_facts(spec)`` takes a resolved spec (pass 2 made its local paths absolute) and returns
the keyword arguments of ``shunter.jobspec.plan.plan_for``; each is None when unknown.

- Parameter counts: computed from the model's config, no torch
  (``shunter.jobspec.spec_counts``): a local model folder's ``config.json`` (read by
  ``service.jobs.paths``, the same size-capped read pass 2 uses) or, for ``from_scratch``,
  ``config_overrides.model_type``'s defaults; ``config_overrides`` on top; a from-scratch
  vocabulary sized to the local tokenizer's ``tokenizer.json``. LoRA/IA3/prefix-tuning
  trainable counts follow PEFT's rules. Hub models and families the counter does not
  describe: None (a dry run does not go to the network, and never guesses).
- Train rows: non-blank lines of a local jsonl/text file, minus the header for a csv, the row
  count in a parquet file's footer; None for json arrays, ``save_to_disk`` folders and hubs.
  Files over ``_MAX_COUNT_BYTES`` are not read (None). A csv with quoted newlines counts its
  non-blank physical lines: an upper bound.

Read-only: nothing is written and nothing is cached across calls.
"""

from __future__ import annotations

import importlib
import os

from service.jobs.paths import local_model_config
from shunter.jobspec import JobSpec
from shunter.jobspec.model_files import tokenizer_size
from shunter.jobspec.spec_counts import spec_memory_facts, spec_param_counts

__all__ = ["memory_facts", "param_counts", "plan_facts", "train_rows"]

_MAX_COUNT_BYTES = 256 * 1024**2


def plan_facts(spec: JobSpec) -> dict[str, int | None]:
    """``param_count``, ``trainable_count``, ``train_rows``, ``optimizer_state_bytes`` and
    ``quantized_param_bytes`` for ``plan_for``."""
    params, trainable = param_counts(spec)
    return {
        "param_count": params,
        "trainable_count": trainable,
        "train_rows": train_rows(spec),
        **memory_facts(spec),
    }


def memory_facts(spec: JobSpec) -> dict[str, int | None]:
    """Optimizer-state and quantized-parameter bytes from the model's layout (issue #29)."""
    return spec_memory_facts(spec, local_config=local_model_config(spec), vocab_size=_vocab(spec))


def param_counts(spec: JobSpec) -> tuple[int | None, int | None]:
    """(all parameters, trainable ones) of the model the spec builds; None where unknown."""
    return spec_param_counts(spec, local_config=local_model_config(spec), vocab_size=_vocab(spec))


def _vocab(spec: JobSpec) -> int | None:
    """A from-scratch model's vocabulary size, read from its local tokenizer; None otherwise.
    Pass 2 resolved local folders to absolute paths inside the data roots; a hub id is not."""
    m = spec.model
    tokenizer = m.tokenizer or m.name_or_path
    if m.from_scratch and tokenizer is not None and os.path.isabs(tokenizer):
        return tokenizer_size(tokenizer)
    return None


def train_rows(spec: JobSpec) -> int | None:
    """Rows of the local train file when counting them is cheap, else None."""
    source = spec.data.train
    path = source.path
    if path is None or not os.path.isfile(path):
        return None
    try:
        if os.path.getsize(path) > _MAX_COUNT_BYTES:
            return None
        if source.format in ("jsonl", "text"):
            return _lines(path)
        if source.format == "csv":
            return max(0, _lines(path) - 1)
        if source.format == "parquet":
            return _parquet_rows(path)
    except (OSError, ValueError):
        return None
    return None


def _lines(path: str) -> int:
    """Non-blank lines (blank lines are no rows of jsonl, and dropped from text by the LM
    tasks that read text files)."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def _parquet_rows(path: str) -> int | None:
    try:
        pq = importlib.import_module("pyarrow.parquet")
    except ImportError:
        return None
    rows: int = pq.ParquetFile(path).metadata.num_rows
    return rows
