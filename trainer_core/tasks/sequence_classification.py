"""``sequence-classification``: one of ``num_labels`` classes per text (or text pair).

Rows: ``text_field`` (and ``text_pair_field``) -> tokens; ``label_field`` -> an int class.
The collator pads dynamically. Loss: cross-entropy over examples (class weights and label
smoothing apply). Metric: ``eval_accuracy``.
"""

from __future__ import annotations

from typing import Any

from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    TaskOps,
    accuracy_metrics,
    cross_entropy_loss,
    cross_entropy_stats,
    require_columns,
    token_count,
)

__all__ = ["OPS", "encode_text", "num_labels"]


def encode_text(
    rows: dict[str, list[Any]], cfg: DataConfig, tok: PreTrainedTokenizerBase
) -> dict[str, Any]:
    """Tokenise ``text_field`` (+ ``text_pair_field``), checking the columns exist."""
    require_columns(
        rows,
        text_field=cfg.text_field,
        text_pair_field=cfg.text_pair_field,
        label_field=cfg.label_field,
    )
    pair = rows[cfg.text_pair_field] if cfg.text_pair_field else None
    return dict(tok(rows[cfg.text_field], pair, truncation=True, max_length=cfg.max_length))


def _encode(
    rows: dict[str, list[Any]], cfg: DataConfig, tok: PreTrainedTokenizerBase
) -> dict[str, Any]:
    out = encode_text(rows, cfg, tok)
    assert cfg.label_field is not None  # the jobspec rules require it
    out["labels"] = [int(v) for v in rows[cfg.label_field]]
    return out


def num_labels(n: int | None) -> dict[str, Any]:
    """The model config's ``num_labels`` when the spec gives one (else the config's)."""
    return {} if n is None else {"num_labels": n}


OPS = TaskOps(
    name="sequence-classification",
    auto_class="AutoModelForSequenceClassification",
    peft_task="SEQ_CLS",
    encode=_encode,
    collator=lambda tok, _config, _seed: DataCollatorWithPadding(tok),
    loss=cross_entropy_loss(shift=False),
    target_count=token_count,
    eval_stats=cross_entropy_stats(shift=False),
    metrics=accuracy_metrics,
    model_kwargs=num_labels,
    required_fields=("text_field", "text_pair_field", "label_field"),
)
