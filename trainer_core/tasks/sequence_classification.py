"""``sequence-classification``: one of ``num_labels`` classes per text (or text pair).

Rows: ``text_field`` (and ``text_pair_field``) -> tokens; ``label_field`` -> an int class.
The collator pads dynamically. Loss: cross-entropy over examples (class weights and label
smoothing apply). Metric: ``eval_accuracy``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from transformers import DataCollatorWithPadding

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    SEQ_CLS_HEAD,
    Encoded,
    Rows,
    Tokenizer,
    classification_task,
    num_labels,
    require_columns,
    tokenizer_collator,
)

__all__ = ["OPS", "encode_labelled", "encode_text", "num_labels"]


def encode_text(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
    """Tokenise ``text_field`` (+ ``text_pair_field``), checking the columns exist."""
    require_columns(
        rows,
        text_field=cfg.text_field,
        text_pair_field=cfg.text_pair_field,
        label_field=cfg.label_field,
    )
    pair = rows[cfg.text_pair_field] if cfg.text_pair_field else None
    return dict(tok(rows[cfg.text_field], pair, truncation=True, max_length=cfg.max_length))


def encode_labelled(
    label: Callable[[Any], Any],
) -> Callable[[Rows, DataConfig, Tokenizer], Encoded]:
    """The encoder of a one-label-per-text task: ``encode_text`` plus ``labels``, each
    ``label_field`` value through ``label`` (int: a class, float: a regression target)."""

    def encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
        out = encode_text(rows, cfg, tok)
        assert cfg.label_field is not None  # the jobspec rules require it
        out["labels"] = [label(v) for v in rows[cfg.label_field]]
        return out

    return encode


OPS = classification_task(
    name="sequence-classification",
    head=SEQ_CLS_HEAD,
    encode=encode_labelled(int),
    collator=tokenizer_collator(DataCollatorWithPadding),
    required=("text_field", "text_pair_field", "label_field"),
)
