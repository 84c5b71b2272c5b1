"""``causal-lm``: next-token prediction on ``text_field``.

Rows: each text tokenised and truncated to ``max_length``; empty texts are dropped. With
``data.packing`` the texts of a map batch are concatenated (EOS between them) and cut into
``max_length`` rows, the short tail dropped (as Hugging Face's run_clm does). The collator
pads to the longest row; labels are the inputs with -100 on padding (the model shifts
nothing: the loss does). Loss: token cross-entropy, position t predicting token t+1.
Metric: ``eval_perplexity``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import PreTrainedTokenizerBase

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    CAUSAL_LM_HEAD,
    Encoded,
    Rows,
    Tokenizer,
    language_model_task,
    require_columns,
    tokenizer_collator,
    without_kv_cache,
)

__all__ = ["OPS", "CausalLMCollator", "pack"]


def _encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
    require_columns(rows, text_field=cfg.text_field)
    text = rows[cfg.text_field]
    if cfg.packing:
        return pack(tok(text)["input_ids"], tok.eos_token_id, cfg.max_length)
    return dict(tok(text, truncation=True, max_length=cfg.max_length))


def pack(ids: list[list[int]], eos: int | None, block: int) -> dict[str, Any]:
    """Concatenate documents (eos between them) and cut into ``block``-token rows.

    The tail shorter than a block is dropped (as HF's run_clm does) within one map batch.
    """
    flat: list[int] = []
    for doc in ids:
        flat.extend(doc)
        if eos is not None:
            flat.append(eos)
    n = (len(flat) // block) * block
    rows = [flat[i : i + block] for i in range(0, n, block)]
    return {"input_ids": rows, "attention_mask": [[1] * block for _ in rows]}


class CausalLMCollator:
    """Pad to the longest row; labels = input_ids with -100 where ``attention_mask`` is 0.

    Masking by the attention mask (not by ``pad_token_id``) keeps real EOS tokens as
    targets when the pad token is the EOS token.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer

    def __call__(self, rows: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = self.tokenizer.pad(
            [{"input_ids": r["input_ids"]} for r in rows], return_tensors="pt"
        )
        labels = batch["input_ids"].clone()
        labels[batch["attention_mask"] == 0] = -100
        return {**batch, "labels": labels}


OPS = language_model_task(
    name="causal-lm",
    head=CAUSAL_LM_HEAD,
    encode=_encode,
    collator=tokenizer_collator(CausalLMCollator),
    shift=True,
    filter_empty=True,
    model_kwargs=without_kv_cache,
)
