"""``masked-lm``: BERT-style masked-token prediction on ``text_field``.

Rows: each text tokenised and truncated to ``max_length`` (with the special-tokens mask, so
[CLS]/[SEP] are never masked); empty texts are dropped. The collator is transformers' MLM
collator (15% of tokens, 80/10/10), drawing from a generator seeded with ``seed`` that the
checkpoint saves, so a resume masks exactly as the uninterrupted run would. Loss: token
cross-entropy over the masked positions. Metric: ``eval_perplexity``.
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DataCollatorForLanguageModeling, PreTrainedTokenizerBase

from trainer_core.config import DataConfig
from trainer_core.tasks.base import (
    MASKED_LM_HEAD,
    Collator,
    Encoded,
    Rows,
    Tokenizer,
    language_model_task,
    require_columns,
)

__all__ = ["OPS"]


def _encode(rows: Rows, cfg: DataConfig, tok: Tokenizer) -> Encoded:
    require_columns(rows, text_field=cfg.text_field)
    return dict(
        tok(
            rows[cfg.text_field],
            truncation=True,
            max_length=cfg.max_length,
            return_special_tokens_mask=True,
        )
    )


def _collator(tok: PreTrainedTokenizerBase, _config: Any, seed: int) -> Collator:
    collator = DataCollatorForLanguageModeling(tok, mlm=True, seed=seed)
    # Create the generator now (HF creates it lazily) so a checkpoint can always save it.
    collator.generator = torch.Generator().manual_seed(seed)
    return collator


OPS = language_model_task(
    name="masked-lm",
    head=MASKED_LM_HEAD,
    encode=_encode,
    collator=_collator,
    shift=False,
    filter_empty=True,
)
