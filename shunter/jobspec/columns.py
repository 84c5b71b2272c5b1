"""The columns a task reads from each dataset row, by the ``data.*_field`` that names them.

One place says it for the service (the submit check against an uploaded dataset's columns,
``service.objects``) and matches what the trainer's tasks read (``trainer_core.tasks``):
chat-sft reads ``messages_field``; every other task ``text_field``; and the pair, label and
target fields where the spec sets them (the jobspec rules say which tasks need which).
"""

from __future__ import annotations

from shunter.jobspec.spec import JobSpec

__all__ = ["task_columns"]


def task_columns(spec: JobSpec) -> list[tuple[str, str]]:
    """``[(data field, column)]`` every row of the spec's datasets must have."""
    d = spec.data
    first = ("messages_field", d.messages_field)
    if spec.model.task != "chat-sft":
        first = ("text_field", d.text_field)
    out = [first]
    for name in ("text_pair_field", "label_field", "target_field"):
        value = getattr(d, name)
        if value is not None:
            out.append((name, value))
    return out
