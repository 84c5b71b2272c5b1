"""``regression``: one real value per text (``num_labels`` 1), mean squared error.

Rows: ``text_field`` (and ``text_pair_field``) -> tokens; ``label_field`` -> a float. Loss:
the summed squared error over the batch, normalised by the loop by the number of examples.
Metrics: ``eval_mse`` (= ``eval_loss``) and ``eval_mae``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from trainer_core.config import DataConfig, TrainingConfig
from trainer_core.tasks.base import TaskOps
from trainer_core.tasks.sequence_classification import encode_text

__all__ = ["OPS"]


def _encode(
    rows: dict[str, list[Any]], cfg: DataConfig, tok: PreTrainedTokenizerBase
) -> dict[str, Any]:
    out = encode_text(rows, cfg, tok)
    assert cfg.label_field is not None  # the jobspec rules require it for regression
    out["labels"] = [float(v) for v in rows[cfg.label_field]]
    return out


def _terms(output: Any, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    pred = output.logits.float().reshape(-1)
    return ((pred - labels.float()) ** 2).sum(), pred.new_tensor(float(labels.numel()))


def _loss(
    output: Any, labels: torch.Tensor, _tc: TrainingConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    return _terms(output, labels)


def _eval_stats(output: Any, labels: torch.Tensor) -> torch.Tensor:
    summed, count = _terms(output, labels)
    abs_sum = (output.logits.float().reshape(-1) - labels.float()).abs().sum()
    return torch.stack([summed, count, abs_sum])


def _metrics(stats: list[float]) -> dict[str, float]:
    n = max(stats[1], 1.0)
    return {"eval_loss": stats[0] / n, "eval_mse": stats[0] / n, "eval_mae": stats[2] / n}


OPS = TaskOps(
    name="regression",
    auto_class="AutoModelForSequenceClassification",
    peft_task="SEQ_CLS",
    encode=_encode,
    collator=lambda tok, _config, _seed: DataCollatorWithPadding(tok),
    loss=_loss,
    target_count=lambda labels: int(labels.numel()),
    eval_stats=_eval_stats,
    metrics=_metrics,
    model_kwargs=lambda _n: {"num_labels": 1, "problem_type": "regression"},
)
