"""``token-classification``: one of ``num_labels`` classes per word (NER-style tagging).

Rows: ``text_field`` holds a list of words and ``label_field`` a list of integer labels,
one per word; the label goes on each word's first sub-token, -100 on continuation and
special tokens. Loss: cross-entropy over labelled tokens (class weights and label
smoothing apply). Metric: ``eval_accuracy`` over labelled tokens.
"""

from __future__ import annotations

from transformers import DataCollatorForTokenClassification

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    TOKEN_CLS_HEAD,
    Encoded,
    Rows,
    Tokenizer,
    classification_task,
    require_columns,
    tokenizer_collator,
)

__all__ = ["OPS", "align_word_labels"]


def _encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
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


OPS = classification_task(
    name="token-classification",
    head=TOKEN_CLS_HEAD,
    encode=_encode,
    collator=tokenizer_collator(DataCollatorForTokenClassification),
    required=("text_field", "label_field"),
)
