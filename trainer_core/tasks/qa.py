"""``question-answering``: extractive QA, a start and an end token in the context.

Rows: ``text_field`` the question, ``text_pair_field`` the context, ``label_field`` SQuAD's
``answers`` (``{"text": [...], "answer_start": [char offsets]}``; the first answer trains).
Tokenised as (question, context) truncating the context only; the offset mapping turns
the answer's character span into token positions. An answer cut off by truncation (or
none) points at position 0 (the CLS token), as in Hugging Face's run_qa. One window per
example (no document stride).

Loss: (CE(start) + CE(end)) / 2 summed over examples. Metrics over predicted token spans
(the end is the best position at or after the predicted start): ``eval_exact_match`` (both
ends right) and ``eval_f1`` (token overlap of predicted and gold spans).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DataCollatorWithPadding, PreTrainedTokenizerBase

from trainer_core.config import DataConfig, TrainingConfig
from trainer_core.tasks.base import (
    QA_HEAD,
    Collator,
    Encoded,
    Rows,
    TaskOps,
    Tokenizer,
    averaged,
    require_columns,
    token_cross_entropy,
)

__all__ = ["OPS", "answer_span", "span_f1"]


def answer_span(
    offsets: list[tuple[int, int]], sequence_ids: list[int | None], start: int, end: int
) -> tuple[int, int]:
    """Token (start, end) covering characters [start, end) of the context; (0, 0) if not all
    of it survived truncation."""
    ctx = [i for i, s in enumerate(sequence_ids) if s == 1]
    if not ctx or offsets[ctx[0]][0] > start or offsets[ctx[-1]][1] < end:
        return 0, 0
    first = next(i for i in ctx if offsets[i][1] > start)
    last = next(i for i in reversed(ctx) if offsets[i][0] < end)
    return first, last


def _encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
    q, c, a = cfg.text_field, cfg.text_pair_field, cfg.label_field
    require_columns(rows, text_field=q, text_pair_field=c, label_field=a)
    assert c is not None and a is not None  # the jobspec rules require both
    enc = tok(
        rows[q],
        rows[c],
        truncation="only_second",
        max_length=cfg.max_length,
        return_offsets_mapping=True,
    )
    labels = []
    for i, answers in enumerate(rows[a]):
        texts, starts = answers.get("text") or [], answers.get("answer_start") or []
        if not texts:
            labels.append([0, 0])
            continue
        begin = int(starts[0])
        span = answer_span(
            enc["offset_mapping"][i], enc.sequence_ids(i), begin, begin + len(texts[0])
        )
        labels.append(list(span))
    out = {k: v for k, v in enc.items() if k != "offset_mapping"}
    out["labels"] = labels
    return out


class SpanCollator:
    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.pad = DataCollatorWithPadding(tokenizer)

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.pad([{k: v for k, v in r.items() if k != "labels"} for r in rows])
        return {**batch, "labels": torch.tensor([r["labels"] for r in rows], dtype=torch.long)}


def _collator(tok: PreTrainedTokenizerBase, _config: Any, _seed: int) -> Collator:
    return SpanCollator(tok)


def _terms(
    output: Any, labels: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    # Each end is a classification over the positions: the shared cross-entropy.
    start = token_cross_entropy(
        output.start_logits, labels[:, 0], shift=False, smoothing=smoothing
    )[0]
    end = token_cross_entropy(output.end_logits, labels[:, 1], shift=False, smoothing=smoothing)[0]
    return (start + end) / 2, start.new_tensor(float(labels.size(0)))


def _loss(
    output: Any, labels: torch.Tensor, tc: TrainingConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    return _terms(output, labels, tc.label_smoothing_factor)


def span_f1(pred: tuple[int, int], gold: tuple[int, int]) -> float:
    """Token-overlap F1 of two inclusive spans."""
    overlap = min(pred[1], gold[1]) - max(pred[0], gold[0]) + 1
    if overlap <= 0:
        return 0.0
    p, r = overlap / (pred[1] - pred[0] + 1), overlap / (gold[1] - gold[0] + 1)
    return 2 * p * r / (p + r)


def _eval_stats(output: Any, labels: torch.Tensor) -> torch.Tensor:
    summed, count = _terms(output, labels, 0.0)
    start = output.start_logits.argmax(-1)
    positions = torch.arange(output.end_logits.size(-1), device=start.device)
    end_logits = output.end_logits.masked_fill(positions[None, :] < start[:, None], float("-inf"))
    end = end_logits.argmax(-1)
    pred = torch.stack([start, end], dim=1).tolist()  # host sync (eval only)
    gold = labels.tolist()
    exact = sum(float(p == g) for p, g in zip(pred, gold, strict=True))
    f1 = sum(span_f1((p[0], p[1]), (g[0], g[1])) for p, g in zip(pred, gold, strict=True))
    return torch.stack([summed.float(), count, summed.new_tensor(exact), summed.new_tensor(f1)])


def _metrics(stats: list[float]) -> dict[str, float]:
    return averaged(stats, eval_loss=0, eval_exact_match=2, eval_f1=3)


OPS = TaskOps(
    name="question-answering",
    head=QA_HEAD,
    encode=_encode,
    collator=_collator,
    loss=_loss,
    target_count=lambda labels: int(labels.size(0)),
    eval_stats=_eval_stats,
    metrics=_metrics,
)
