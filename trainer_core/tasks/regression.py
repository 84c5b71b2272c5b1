"""``regression``: one real value per text (``num_labels`` 1), mean squared error.

Rows: ``text_field`` (and ``text_pair_field``) -> tokens; ``label_field`` -> a float. Loss:
the summed squared error over the batch, normalised by the loop by the number of examples.
Metrics: ``eval_mse`` (= ``eval_loss``) and ``eval_mae``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DataCollatorWithPadding

from trainer_core.tasks.base import (
    SEQ_CLS_HEAD,
    TaskOps,
    averaged,
    terms_loss,
    tokenizer_collator,
)
from trainer_core.tasks.sequence_classification import encode_labelled

__all__ = ["OPS"]


def _terms(output: Any, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pred = output.logits.float().reshape(-1)
    return ((pred - labels.float()) ** 2).sum(), pred.new_tensor(float(labels.numel()))


_loss = terms_loss(_terms)


def _eval_stats(output: Any, labels: torch.Tensor) -> torch.Tensor:
    summed, count = _terms(output, labels)
    abs_sum = (output.logits.float().reshape(-1) - labels.float()).abs().sum()
    return torch.stack([summed, count, abs_sum])


def _metrics(stats: list[float]) -> dict[str, float]:
    return averaged(stats, eval_loss=0, eval_mse=0, eval_mae=2)


OPS = TaskOps(
    name="regression",
    head=SEQ_CLS_HEAD,
    encode=encode_labelled(float),
    collator=tokenizer_collator(DataCollatorWithPadding),
    loss=_loss,
    target_count=lambda labels: int(labels.numel()),
    eval_stats=_eval_stats,
    metrics=_metrics,
    model_kwargs=lambda _n: {"num_labels": 1, "problem_type": "regression"},
)
