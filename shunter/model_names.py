"""Names of fine-tuned models (OpenAI's ``ft:`` shape) and what they resolve to.

One home for the format, read by the server (``service.openai``: ``fine_tuned_model`` and
``fine_tuned_model_checkpoint``) and by the client (``shunter download ft:...``):

    ft:<base>:<team>:<suffix>:<id>                 job ``job-<id>``'s final model
    ft:<base>:<team>:<suffix>:<id>:ckpt-step-<N>   its verified checkpoint at step N

Both download from ``GET /v1/jobs/job-<id>/checkpoints/{final|N}/download``. Standard
library only.
"""

from __future__ import annotations

import re

__all__ = ["fine_tuned_model_name", "model_ref"]

_STEP = re.compile(r"^ckpt-step-(\d+)$")


def fine_tuned_model_name(
    base: str, team: str, suffix: str | None, job_id: str, *, step: int | None = None
) -> str:
    """OpenAI's ``ft:<base>:<org>:<suffix>:<id>`` shape, with our team as the org; with
    ``step``, the name of that step's checkpoint (``:ckpt-step-<N>``)."""
    name = f"ft:{base}:{team}:{suffix or ''}:{job_id.removeprefix('job-')}"
    return name if step is None else f"{name}:ckpt-step-{step}"


def model_ref(name: str) -> tuple[str, str] | None:
    """``(job id, checkpoint)`` that a fine-tuned model name resolves to (``checkpoint`` is
    ``final`` or a step number); ``None`` for a name that is not ``ft:`` shaped."""
    if not name.startswith("ft:"):
        return None
    parts = name.split(":")
    checkpoint = "final"
    if parts and (m := _STEP.match(parts[-1])):
        checkpoint, parts = m.group(1), parts[:-1]
    # ft, base (may itself hold ':'), team, suffix, id: read from the right
    if len(parts) < 5 or not parts[-1]:
        return None
    return f"job-{parts[-1]}", checkpoint
