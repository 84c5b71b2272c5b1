"""``token-classification``: one of ``num_labels`` classes per word (NER-style tagging).

Rows: ``text_field`` holds a list of words and ``label_field`` a list of integer labels,
one per word; the label goes on each word's first sub-token, -100 on continuation and
special tokens. Loss: cross-entropy over labelled tokens (class weights and label
smoothing apply). Metric: ``eval_accuracy`` over labelled tokens.
"""

from __future__ import annotations

from typing import Any

from transformers import DataCollatorForTokenClassification, PreTrainedTokenizerBase

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    TaskOps,
    accuracy_metrics,
    cross_entropy_loss,
    cross_entropy_stats,
    require_columns,
    token_count,
)
from trainer_core.tasks.sequence_classification import num_labels

__all__ = ["OPS", "align_word_labels"]


def _encode(
    rows: dict[str, list[Any]], cfg: DataConfig, tok: PreTrainedTokenizerBase
) -> dict[str, Any]:
    require_columns(rows, text_field=cfg.text_field, label_field=cfg.label_field)
    assert cfg.label_field is not None
    out = tok(
        rows[cfg.text_field], is_split_into_words=True, truncation=True, max_length=cfg.max_length
    )
    out["labels"] = [
        align_word_labels(out.word_ids(i), word_labels)
        for i, word_labels in enumerate(rows[cfg.label_field])
    ]
    return dict(out)


def align_word_labels(word_ids: list[int | None], word_labels: list[int]) -> list[int]:
    """Label each word's first sub-token; continuation and special tokens get -100."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(-100 if word is None or word == previous else int(word_labels[word]))
        previous = word
    return labels


OPS = TaskOps(
    name="token-classification",
    auto_class="AutoModelForTokenClassification",
    peft_task="TOKEN_CLS",
    encode=_encode,
    collator=lambda tok, _config, _seed: DataCollatorForTokenClassification(tok),
    loss=cross_entropy_loss(shift=False),
    target_count=token_count,
    eval_stats=cross_entropy_stats(shift=False),
    metrics=accuracy_metrics,
    model_kwargs=num_labels,
    required_fields=("text_field", "label_field"),
)
