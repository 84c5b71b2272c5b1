"""Tasks beyond the original four: one module per task with its encoding, collator, loss and
metrics (``TaskOps``, see ``base.py``). ``TASK_OPS[name]`` is the one table the loop,
``data.py`` and ``model.py`` consult; a task not in it is one of the original four."""

from __future__ import annotations

from trainer_core.tasks import chat_sft, multilabel, qa, regression, seq2seq
from trainer_core.tasks.base import TaskOps

__all__ = ["TASK_OPS", "TaskOps"]

TASK_OPS: dict[str, TaskOps] = {
    ops.name: ops for ops in (chat_sft.OPS, seq2seq.OPS, regression.OPS, multilabel.OPS, qa.OPS)
}
