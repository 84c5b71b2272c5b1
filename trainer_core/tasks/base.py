"""What a task is to the loop: encode rows, collate a batch, its loss and its eval metrics.

``TaskOps`` bundles the functions of one task (one module per task in this package). The
loop, ``data.py`` and ``model.py`` look every task up in ``trainer_core.tasks.TASK_OPS``
(``task_ops(name)``) and nowhere else say what a task is.

Contract of each function:
- ``encode(rows, cfg, tokenizer)``: a batched ``datasets.map`` function; returns model-input
  columns plus ``labels`` (any shape the task's collator understands).
- ``collator(tokenizer, model_config, seed)``: a callable from a list of encoded rows to a
  batch of tensors; ``labels`` is always one of the keys and is popped by the loop before
  forward. ``seed`` seeds a collator that draws (masked LM); it keeps the generator it draws
  from as ``.generator`` so a checkpoint saves it.
- ``loss(output, labels, training)``: (summed loss over the batch's targets, target count),
  both 0-dim device tensors; the loop divides by the count summed over the window and ranks.
- ``target_count(labels)``: the same count as a host int (no device sync: CPU labels).
- ``eval_stats(output, labels)``: a 1-D float tensor of sums whose first two entries are the
  summed loss and the target count; ``metrics(stats)`` turns the all-reduced sums into
  ``eval_*`` metrics (``eval_loss`` included).

The cross-entropy tasks share one loss: ``token_cross_entropy``, through
``cross_entropy_loss`` (training: the spec's class weights and label smoothing) and
``cross_entropy_stats`` (eval: the plain loss, its target count and correct predictions).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig, TrainingConfig

__all__ = [
    "Collator",
    "EvalStats",
    "Loss",
    "TaskOps",
    "accuracy_metrics",
    "cross_entropy_loss",
    "cross_entropy_stats",
    "pad_to",
    "perplexity_metrics",
    "require_columns",
    "shift_count",
    "token_count",
    "token_cross_entropy",
]

Collator = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]
Loss = Callable[[Any, torch.Tensor, TrainingConfig], tuple[torch.Tensor, torch.Tensor]]
EvalStats = Callable[[Any, torch.Tensor], torch.Tensor]


@dataclass(frozen=True, kw_only=True)
class TaskOps:
    name: str
    auto_class: str  # transformers AutoModelFor* class name
    peft_task: str  # peft TaskType name
    encode: Callable[[dict[str, list[Any]], DataConfig, PreTrainedTokenizerBase], dict[str, Any]]
    collator: Callable[[PreTrainedTokenizerBase, Any, int], Collator]
    loss: Loss
    target_count: Callable[[torch.Tensor], int]
    eval_stats: EvalStats
    metrics: Callable[[list[float]], dict[str, float]]
    # Extra keyword arguments for the model config (num_labels, problem_type, ...).
    model_kwargs: Callable[[int | None], dict[str, Any]] = field(default=lambda _n: {})
    # Drop rows with an empty ``text_field`` before encoding (language-model style tasks).
    filter_empty: bool = False
    # ``DataConfig`` fields naming columns every row must have, non-null, checked as the file
    # is read (errors name the file and line); unset fields are skipped.
    required_fields: tuple[str, ...] = ()


def pad_to(rows: list[list[int]], value: int, length: int | None = None) -> torch.Tensor:
    """Right-pad integer rows to ``length`` (default: the longest) as a LongTensor."""
    width = length if length is not None else max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), width), value, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row[:width], dtype=torch.long)
    return out


def require_columns(columns: Collection[str], **fields: str | None) -> None:
    """Raise naming the spec field (``text_field=cfg.text_field``...) when the column it
    names is not among ``columns`` (a batch of rows, or a dataset's column names). Fields
    left unset (None) are skipped: the jobspec rules say which ones a task needs."""
    for name, column in fields.items():
        if column is not None and column not in columns:
            raise ValueError(f"data.{name} {column!r} not in the data's columns {list(columns)}")


# -------------------------------------------------------------------- cross-entropy


def token_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    shift: bool,
    weight: list[float] | None = None,
    smoothing: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """THE cross-entropy of every token/class task: (summed loss over the targets, target
    count, correct argmax predictions), 0-dim device tensors; labels of -100 do not count.
    ``shift``: causal LM, position t predicts token t+1. Computed in float32."""
    if shift:
        logits, labels = logits[:, :-1], labels[:, 1:]
    flat = logits.reshape(-1, logits.size(-1)).float()
    target = labels.reshape(-1)
    summed = torch.nn.functional.cross_entropy(
        flat,
        target,
        weight=None if weight is None else torch.tensor(weight, device=flat.device),
        ignore_index=-100,
        reduction="sum",
        label_smoothing=smoothing,
    )
    valid = target != -100
    return summed, valid.sum(), ((flat.argmax(-1) == target) & valid).sum()


def cross_entropy_loss(*, shift: bool) -> Loss:
    """The training loss of a task whose output has ``logits``: ``token_cross_entropy`` with
    the spec's class weights (classification only) and label smoothing."""

    def loss(
        output: Any, labels: torch.Tensor, tc: TrainingConfig
    ) -> tuple[torch.Tensor, torch.Tensor]:
        summed, count, _ = token_cross_entropy(
            output.logits,
            labels,
            shift=shift,
            weight=tc.class_weights,
            smoothing=tc.label_smoothing_factor,
        )
        return summed, count

    return loss


def cross_entropy_stats(*, shift: bool) -> EvalStats:
    """Eval sums of a ``logits`` task: [summed loss, target count, correct predictions], the
    plain loss (no class weights, no smoothing), as float32."""

    def stats(output: Any, labels: torch.Tensor) -> torch.Tensor:
        terms = token_cross_entropy(output.logits, labels, shift=shift)
        return torch.stack([t.float() for t in terms])

    return stats


def token_count(labels: torch.Tensor) -> int:
    """Targets of a batch: every label that is not -100."""
    return int((labels != -100).sum())


def shift_count(labels: torch.Tensor) -> int:
    """Targets of a causal LM batch: position t predicts t+1, so the first label never counts."""
    return token_count(labels[:, 1:])


def perplexity_metrics(stats: list[float]) -> dict[str, float]:
    """``eval_loss`` and ``eval_perplexity`` from [summed loss, count, ...]."""
    loss = stats[0] / max(stats[1], 1.0)
    return {"eval_loss": loss, "eval_perplexity": math.exp(min(loss, 50.0))}


def accuracy_metrics(stats: list[float]) -> dict[str, float]:
    """``eval_loss`` and ``eval_accuracy`` from ``cross_entropy_stats`` sums."""
    count = max(stats[1], 1.0)
    return {"eval_loss": stats[0] / count, "eval_accuracy": stats[2] / count}
