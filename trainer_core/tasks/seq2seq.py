"""``seq2seq``: an encoder-decoder (e.g. T5 from a config) maps ``text_field`` to
``target_field``.

Rows: source tokens as ``input_ids``; target tokens as ``labels``. The collator pads labels
with -100 and builds ``decoder_input_ids`` (labels shifted right, starting with the model's
``decoder_start_token_id``), so the forward never needs the labels. Loss: token
cross-entropy over target tokens (label smoothing applies). Metric ``eval_rouge_l``: the
ROUGE-L F-measure (longest common subsequence) between the greedy teacher-forced prediction
and the target, token ids, averaged over examples; computed here, nothing downloaded.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    SEQ2SEQ_HEAD,
    Collator,
    Encoded,
    Rows,
    TaskOps,
    Tokenizer,
    cross_entropy_loss,
    cross_entropy_stats,
    pad_to,
    require_columns,
    token_count,
)

__all__ = ["OPS", "Seq2SeqCollator", "rouge_l"]


def _encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
    require_columns(rows, text_field=cfg.text_field, target_field=cfg.target_field)
    assert cfg.target_field is not None  # the jobspec rules require it for seq2seq
    out = dict(
        tok([str(t) for t in rows[cfg.text_field]], truncation=True, max_length=cfg.max_length)
    )
    targets = tok(
        [str(t) for t in rows[cfg.target_field]], truncation=True, max_length=cfg.max_length
    )
    out["labels"] = targets["input_ids"]
    return out


class Seq2SeqCollator:
    def __init__(self, tokenizer: PreTrainedTokenizerBase, config: Any) -> None:
        self.tokenizer = tokenizer
        self.pad_id = int(tokenizer.pad_token_id)
        start = getattr(config, "decoder_start_token_id", None)
        self.start_id = int(start) if start is not None else self.pad_id

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        inputs = [{k: v for k, v in r.items() if k != "labels"} for r in rows]
        batch = self.tokenizer.pad(inputs, return_tensors="pt")
        labels = pad_to([r["labels"] for r in rows], -100)
        decoder = labels.new_full(labels.shape, self.pad_id)
        decoder[:, 0] = self.start_id
        decoder[:, 1:] = labels[:, :-1].masked_fill(labels[:, :-1] == -100, self.pad_id)
        return {**batch, "decoder_input_ids": decoder, "labels": labels}


def _collator(tok: PreTrainedTokenizerBase, config: Any, _seed: int) -> Collator:
    return Seq2SeqCollator(tok, config)


def rouge_l(prediction: list[int], reference: list[int]) -> float:
    """ROUGE-L F1 of two token sequences: 2PR/(P+R) with P, R from their LCS length."""
    if not prediction or not reference:
        return float(prediction == reference)
    prev = [0] * (len(reference) + 1)
    for p in prediction:
        cur = [0]
        for j, r in enumerate(reference):
            cur.append(prev[j] + 1 if p == r else max(prev[j + 1], cur[j]))
        prev = cur
    lcs = prev[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(prediction), lcs / len(reference)
    return 2 * precision * recall / (precision + recall)


_cross_entropy_stats = cross_entropy_stats(shift=False)


def _eval_stats(output: Any, labels: torch.Tensor) -> torch.Tensor:
    summed, count = _cross_entropy_stats(output, labels)[:2]
    pred = output.logits.argmax(-1).tolist()  # host sync (eval only)
    gold = labels.tolist()
    total = 0.0
    for p, g in zip(pred, gold, strict=True):
        keep = [i for i, t in enumerate(g) if t != -100]
        total += rouge_l([p[i] for i in keep], [g[i] for i in keep])
    n = summed.new_tensor(float(len(gold)))
    return torch.stack([summed, count, summed.new_tensor(total), n])


def _metrics(stats: list[float]) -> dict[str, float]:
    return {
        "eval_loss": stats[0] / max(stats[1], 1.0),
        "eval_rouge_l": stats[2] / max(stats[3], 1.0),
    }


OPS = TaskOps(
    name="seq2seq",
    head=SEQ2SEQ_HEAD,
    encode=_encode,
    collator=_collator,
    loss=cross_entropy_loss(shift=False),
    target_count=token_count,
    eval_stats=_eval_stats,
    metrics=_metrics,
)
