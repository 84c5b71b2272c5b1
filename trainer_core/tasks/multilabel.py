"""``multi-label-classification``: any subset of ``num_labels`` labels per text, BCE.

Rows: ``label_field`` holds the list of label ids that apply (``[0, 3]``; ``[]`` for none).
The collator turns it into a multi-hot float vector of ``num_labels`` (read from the model
config). Loss: binary cross-entropy with logits summed over every (example, label) pair,
normalised by the loop by the number of pairs. Metric: micro-F1 at threshold 0.5.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    SEQ_CLS_HEAD,
    Collator,
    Encoded,
    Rows,
    TaskOps,
    Tokenizer,
    terms_loss,
)
from trainer_core.tasks.sequence_classification import encode_text

__all__ = ["OPS", "micro_f1"]


def _encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
    out = encode_text(rows, cfg, tok)
    assert cfg.label_field is not None
    labels = []
    for i, ids in enumerate(rows[cfg.label_field]):
        if not isinstance(ids, list) or not all(isinstance(x, int) for x in ids):
            raise ValueError(f"row {i}: {cfg.label_field} must be a list of label ids")
        labels.append(ids)
    out["label_ids"] = labels
    return out


class MultiHotCollator:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, num_labels: int) -> None:
        self.pad = DataCollatorWithPadding(tokenizer)
        self.num_labels = num_labels

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.pad([{k: v for k, v in r.items() if k != "label_ids"} for r in rows])
        hot = torch.zeros(len(rows), self.num_labels)
        for i, r in enumerate(rows):
            for j in r["label_ids"]:
                if not 0 <= j < self.num_labels:
                    raise ValueError(f"label id {j} outside 0..{self.num_labels - 1}")
                hot[i, j] = 1.0
        return {**batch, "labels": hot}


def _collator(tok: PreTrainedTokenizerBase, config: Any, _seed: int) -> Collator:
    return MultiHotCollator(tok, int(config.num_labels))


def _terms(output: Any, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    logits = output.logits.float()
    summed = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="sum")
    return summed, logits.new_tensor(float(labels.numel()))


_loss = terms_loss(_terms)


def _eval_stats(output: Any, labels: torch.Tensor) -> torch.Tensor:
    summed, count = _terms(output, labels)
    pred = output.logits.float() > 0  # sigmoid > 0.5
    gold = labels > 0.5
    tp = (pred & gold).sum().float()
    fp = (pred & ~gold).sum().float()
    fn = (~pred & gold).sum().float()
    return torch.stack([summed, count, tp, fp, fn])


def micro_f1(tp: float, fp: float, fn: float) -> float:
    """F1 over all (example, label) decisions pooled; 1.0 when there is nothing to find."""
    denom = 2 * tp + fp + fn
    return 1.0 if denom == 0 else 2 * tp / denom


def _metrics(stats: list[float]) -> dict[str, float]:
    loss = stats[0] / max(stats[1], 1.0)
    return {"eval_loss": loss, "eval_micro_f1": micro_f1(stats[2], stats[3], stats[4])}


OPS = TaskOps(
    name="multi-label-classification",
    head=SEQ_CLS_HEAD,
    encode=_encode,
    collator=_collator,
    loss=_loss,
    target_count=lambda labels: int(labels.numel()),
    eval_stats=_eval_stats,
    metrics=_metrics,
    model_kwargs=lambda n: {"num_labels": n, "problem_type": "multi_label_classification"},
)
