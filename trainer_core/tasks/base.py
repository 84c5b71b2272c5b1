"""What a task is to the loop: encode rows, collate a batch, its loss and its eval metrics.

``TaskOps`` bundles the functions of one task (one module per task in this package). The
loop, ``data.py`` and ``model.py`` look a task up in ``trainer_core.tasks.TASK_OPS``; the four
original tasks (causal-lm, masked-lm, sequence- and token-classification) still live in those
modules and are not in the table.

Contract of each function:
- ``encode(rows, cfg, tokenizer)``: a batched ``datasets.map`` function; returns model-input
  columns plus ``labels`` (any shape the task's collator understands).
- ``collator(tokenizer, model_config)``: a callable from a list of encoded rows to a batch
  of tensors; ``labels`` is always one of the keys and is popped by the loop before forward.
- ``loss(output, labels, training)``: (summed loss over the batch's targets, target count),
  both 0-dim device tensors; the loop divides by the count summed over the window and ranks.
- ``target_count(labels)``: the same count as a host int (no device sync: CPU labels).
- ``eval_stats(output, labels)``: a 1-D float tensor of sums whose first two entries are the
  summed loss and the target count; ``metrics(stats)`` turns the all-reduced sums into
  ``eval_*`` metrics (``eval_loss`` included).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig, TrainingConfig

__all__ = ["Collator", "TaskOps", "pad_to", "shift_count"]

Collator = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]


@dataclass(frozen=True, kw_only=True)
class TaskOps:
    name: str
    auto_class: str  # transformers AutoModelFor* class name
    peft_task: str  # peft TaskType name
    encode: Callable[[dict[str, list[Any]], DataConfig, PreTrainedTokenizerBase], dict[str, Any]]
    collator: Callable[[PreTrainedTokenizerBase, Any], Collator]
    loss: Callable[[Any, torch.Tensor, TrainingConfig], tuple[torch.Tensor, torch.Tensor]]
    target_count: Callable[[torch.Tensor], int]
    eval_stats: Callable[[Any, torch.Tensor], torch.Tensor]
    metrics: Callable[[list[float]], dict[str, float]]
    # Extra keyword arguments for the model config (num_labels, problem_type, ...).
    model_kwargs: Callable[[int | None], dict[str, Any]] = field(default=lambda _n: {})
    # Drop rows with an empty text before encoding (language-model style tasks).
    filter_empty: bool = False


def pad_to(rows: list[list[int]], value: int, length: int | None = None) -> torch.Tensor:
    """Right-pad integer rows to ``length`` (default: the longest) as a LongTensor."""
    width = length if length is not None else max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row[:width], dtype=torch.long)
    return out


def shift_count(labels: torch.Tensor) -> int:
    """Targets of a causal LM batch: position t predicts t+1, so the first label never counts."""
    return int((labels[:, 1:] != -100).sum())
