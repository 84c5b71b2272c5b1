"""Every task the loop trains, one module each, with its encoding, collator, loss and metrics
(``TaskOps``, see ``base.py``). ``TASK_OPS`` is the one table the loop, ``data.py`` and
``model.py`` consult (``task_ops(name)``); no other module says what a task is."""

from __future__ import annotations

from trainer_core.tasks import (
    causal_lm,
    chat_sft,
    masked_lm,
    multilabel,
    qa,
    regression,
    seq2seq,
    sequence_classification,
    token_classification,
)
from trainer_core.tasks.base import TaskOps

__all__ = ["TASK_OPS", "TaskOps", "task_ops"]

TASK_OPS: dict[str, TaskOps] = {
    ops.name: ops
    for ops in (
        causal_lm.OPS,
        masked_lm.OPS,
        sequence_classification.OPS,
        token_classification.OPS,
        chat_sft.OPS,
        seq2seq.OPS,
        regression.OPS,
        multilabel.OPS,
        qa.OPS,
    )
}


def task_ops(task: str) -> TaskOps:
    """The ``TaskOps`` of ``task``; a name the jobspec would have refused raises."""
    try:
        return TASK_OPS[task]
    except KeyError:
        raise ValueError(f"unknown task {task!r}; one of {', '.join(sorted(TASK_OPS))}") from None
