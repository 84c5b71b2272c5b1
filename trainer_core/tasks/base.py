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
from typing import Any, TypedDict

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig, TrainingConfig

__all__ = [
    "CAUSAL_LM_HEAD",
    "MASKED_LM_HEAD",
    "QA_HEAD",
    "SEQ2SEQ_HEAD",
    "SEQ_CLS_HEAD",
    "TOKEN_CLS_HEAD",
    "Collator",
    "CrossEntropy",
    "Encoded",
    "Encoder",
    "EvalStats",
    "Head",
    "Loss",
    "Rows",
    "TaskOps",
    "Tokenizer",
    "accuracy_metrics",
    "averaged",
    "classification_task",
    "cross_entropy",
    "cross_entropy_loss",
    "cross_entropy_stats",
    "language_model_task",
    "num_labels",
    "pad_to",
    "perplexity_metrics",
    "require_columns",
    "shift_count",
    "terms_loss",
    "token_count",
    "token_cross_entropy",
    "tokenizer_collator",
    "without_kv_cache",
]

Collator = Callable[[list[dict[str, Any]]], dict[str, torch.Tensor]]
Loss = Callable[[Any, torch.Tensor, TrainingConfig], tuple[torch.Tensor, torch.Tensor]]
EvalStats = Callable[[Any, torch.Tensor], torch.Tensor]
Terms = Callable[[Any, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
Rows = dict[str, list[Any]]  # a batch of rows as ``datasets.map`` gives it: column -> values
Encoded = dict[str, Any]  # model-input columns plus ``labels``
Tokenizer = PreTrainedTokenizerBase
CollatorFactory = Callable[[Tokenizer, Any, int], Collator]
Encoder = Callable[[Rows, DataConfig, Tokenizer], Encoded]


@dataclass(frozen=True)
class Head:
    """A model head: the transformers ``AutoModelFor*`` class and the peft ``TaskType``."""

    auto_class: str
    peft_task: str


CAUSAL_LM_HEAD = Head("AutoModelForCausalLM", "CAUSAL_LM")
MASKED_LM_HEAD = Head("AutoModelForMaskedLM", "FEATURE_EXTRACTION")
SEQ_CLS_HEAD = Head("AutoModelForSequenceClassification", "SEQ_CLS")
TOKEN_CLS_HEAD = Head("AutoModelForTokenClassification", "TOKEN_CLS")
SEQ2SEQ_HEAD = Head("AutoModelForSeq2SeqLM", "SEQ_2_SEQ_LM")
QA_HEAD = Head("AutoModelForQuestionAnswering", "QUESTION_ANS")


@dataclass(frozen=True, kw_only=True)
class TaskOps:
    name: str
    head: Head
    encode: Encoder
    collator: CollatorFactory
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

    @property
    def auto_class(self) -> str:
        """The transformers ``AutoModelFor*`` class name."""
        return self.head.auto_class

    @property
    def peft_task(self) -> str:
        """The peft ``TaskType`` name."""
        return self.head.peft_task


def num_labels(n: int | None) -> dict[str, Any]:
    """The model config's ``num_labels`` when the spec gives one (else the config's)."""
    return {} if n is None else {"num_labels": n}


def without_kv_cache(_n: int | None) -> dict[str, Any]:
    """Model config for training a causal LM: no KV cache (training never reads one; building
    it each forward costs time, recompiles under torch.compile, and makes transformers skip
    packed-sequence detection)."""
    return {"use_cache": False}


def classification_task(
    *, name: str, head: Head, encode: Encoder, collator: CollatorFactory, required: tuple[str, ...]
) -> TaskOps:
    """A task of one class per example or per token: cross-entropy per position (class weights
    and label smoothing apply), ``eval_accuracy``, the spec's ``num_labels``; ``required``:
    the ``DataConfig`` column fields every row must have."""
    return TaskOps(
        name=name,
        head=head,
        encode=encode,
        collator=collator,
        **cross_entropy(shift=False),
        metrics=accuracy_metrics,
        model_kwargs=num_labels,
        required_fields=required,
    )


def language_model_task(
    *, name: str, head: Head, encode: Encoder, collator: CollatorFactory, shift: bool, **more: Any
) -> TaskOps:
    """A task that predicts tokens (``shift``: the next one, as causal LM and chat SFT; else
    the masked ones): token cross-entropy, ``eval_perplexity``; ``more``: other ``TaskOps``
    fields."""
    return TaskOps(
        name=name,
        head=head,
        encode=encode,
        collator=collator,
        **cross_entropy(shift=shift),
        metrics=perplexity_metrics,
        **more,
    )


def tokenizer_collator(make: Callable[[Tokenizer], Collator]) -> CollatorFactory:
    """The collator factory of a task whose collator needs only the tokenizer."""
    return lambda tok, _config, _seed: make(tok)


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


def averaged(stats: list[float], **at: int) -> dict[str, float]:
    """Each named metric: the sum at its index in ``stats`` over the target count
    (``stats[1]``, at least 1)."""
    count = max(stats[1], 1.0)
    return {name: stats[i] / count for name, i in at.items()}


def accuracy_metrics(stats: list[float]) -> dict[str, float]:
    """``eval_loss`` and ``eval_accuracy`` from ``cross_entropy_stats`` sums."""
    return averaged(stats, eval_loss=0, eval_accuracy=2)


class CrossEntropy(TypedDict):
    """A token cross-entropy task's loss, target count and eval stats (``TaskOps`` fields)."""

    loss: Loss
    target_count: Callable[[torch.Tensor], int]
    eval_stats: EvalStats


def cross_entropy(*, shift: bool) -> CrossEntropy:
    """The three fields of a cross-entropy task: next-token (``shift``: causal LM, chat SFT)
    or per position (masked LM, classification)."""
    return CrossEntropy(
        loss=cross_entropy_loss(shift=shift),
        target_count=shift_count if shift else token_count,
        eval_stats=cross_entropy_stats(shift=shift),
    )


def terms_loss(terms: Terms) -> Loss:
    """The loss of a task whose (summed loss, target count) ``terms`` need no training
    config (regression, multi-label)."""

    def loss(
        output: Any, labels: torch.Tensor, _tc: TrainingConfig
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return terms(output, labels)

    return loss
