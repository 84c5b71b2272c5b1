"""``evaluate``: the task's eval metrics over a dataset, summed over batches and ranks."""

from __future__ import annotations

from typing import Any

import torch

from trainer_core.config import TrainConfig
from trainer_core.data import eval_batches, make_collator
from trainer_core.engine import Engine
from trainer_core.tasks import task_ops
from trainer_core.train_step import dataset_rows

__all__ = ["evaluate"]


@torch.no_grad()
def evaluate(engine: Engine, ds: Any, cfg: TrainConfig, tokenizer: Any) -> dict[str, float]:
    """The task's eval metrics over ``ds``: its ``eval_stats`` summed over batches and ranks,
    then its ``metrics``."""
    task = cfg.model.task
    ops = task_ops(task)
    # A fresh, fixed-seed collator: eval masking (MLM) is the same every time and does not
    # consume the training collator's random stream.
    model_config = getattr(engine.unwrapped, "config", None)
    collate = make_collator(task, tokenizer, seed=cfg.training.seed, model_config=model_config)
    engine.model.eval()
    totals: torch.Tensor | None = None
    for indices, real in eval_batches(
        len(ds),
        batch_size=cfg.training.per_device_eval_batch_size,
        dp_rank=engine.dp_rank,
        dp_size=engine.dp_size,
    ):
        batch = {k: v.to(engine.device) for k, v in collate(dataset_rows(ds, indices)).items()}
        labels = batch.pop("labels")
        stats = ops.eval_stats(engine.forward(**batch), labels)
        stats = stats if real else 0 * stats  # a padding batch: every rank runs each forward
        totals = stats if totals is None else totals + stats
    engine.model.train()
    assert totals is not None  # eval_batches yields at least one batch per rank
    return ops.metrics(engine.reduce_sum(totals).tolist())  # host sync (eval only)
