"""Pure translations between OpenAI's fine-tuning objects and ours.

``job_spec``: a ``/v1/fine_tuning/jobs`` request + its catalog model + the files' paths ->
a JobSpec document (then submitted like any other, so admission is shared). ``ft_job``,
``ft_event``, ``ft_checkpoint``: our rows -> OpenAI's objects. Ids map one to one:
``job-X`` <-> ``ftjob-X``, event ``N`` <-> ``ftevent-N``, checkpoint ``N`` <-> ``ftckpt-N``.

Hyperparameters: ``n_epochs`` -> ``training.num_train_epochs``, ``batch_size`` ->
``per_device_train_batch_size``, ``learning_rate_multiplier`` x the catalog model's
learning rate; ``"auto"`` takes the catalog default. A validation file becomes
``data.eval``, evaluated and checkpointed once per epoch (OpenAI checkpoints per epoch too).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Literal

from service.db.rows import unix_seconds
from service.openai.catalog import CatalogModel
from shunter.model_names import fine_tuned_model_name

__all__ = [
    "FtStatus",
    "fine_tuned_model_name",
    "ft_checkpoint",
    "ft_event",
    "ft_job",
    "ft_job_id",
    "ft_status",
    "job_id_of",
    "job_spec",
    "resolved_hyperparameters",
]

FtStatus = Literal[
    "validating_files", "queued", "running", "succeeded", "failed", "cancelled", "paused"
]
# Our job status -> OpenAI's. `starting` (resources being acquired) and `cancelling` (a stop
# on its way) are still running from the caller's point of view.
_STATUS: dict[str, FtStatus] = {
    "queued": "queued",
    "starting": "running",
    "running": "running",
    "cancelling": "running",
    "succeeded": "succeeded",
    "failed": "failed",
    "cancelled": "cancelled",
    "paused": "paused",
    "pruned": "cancelled",  # a sweep's trial stopped early; OpenAI has no such state
}
_DEFAULTS = {"n_epochs": 3, "batch_size": 4, "learning_rate": 1e-3}


def ft_status(status: str) -> FtStatus:
    return _STATUS[status]


def ft_job_id(job_id: str) -> str:
    return "ft" + job_id  # job-X -> ftjob-X


def job_id_of(ft_id: str) -> str | None:
    """``ftjob-X`` -> ``job-X``; None for anything else (the caller answers 404)."""
    return ft_id[2:] if re.fullmatch(r"ftjob-[0-9a-z]{1,60}", ft_id) else None


def _ts(value: datetime | None) -> int | None:
    """Unix seconds; SQLite returns naive datetimes, which are UTC here."""
    return None if value is None else unix_seconds(value)


def resolved_hyperparameters(given: dict[str, Any], model: CatalogModel) -> dict[str, int | float]:
    """``n_epochs``, ``batch_size``, ``learning_rate_multiplier`` with "auto" replaced."""
    training = model.defaults.get("training", {})
    n_epochs = given.get("n_epochs", "auto")
    batch = given.get("batch_size", "auto")
    mult = given.get("learning_rate_multiplier", "auto")
    return {
        "n_epochs": training.get("num_train_epochs", _DEFAULTS["n_epochs"])
        if n_epochs == "auto"
        else n_epochs,
        "batch_size": training.get("per_device_train_batch_size", _DEFAULTS["batch_size"])
        if batch == "auto"
        else batch,
        "learning_rate_multiplier": 1.0 if mult == "auto" else float(mult),
    }


def _job_name(model: str, suffix: str | None) -> str:
    raw = f"ft-{suffix or model}".lower()
    name = re.sub(r"[^a-z0-9._-]+", "-", raw).strip("-._")[:63]
    return name or "ft-job"


def _source(where: str) -> dict[str, str]:
    """A file's data source: its dataset in the store (``ds-...``), or a local path (files
    uploaded before the store)."""
    if where.startswith("ds-"):
        return {"dataset": where}
    return {"path": where, "format": "jsonl"}


def job_spec(
    *,
    model: CatalogModel,
    hyperparameters: dict[str, int | float],
    training_path: str,
    validation_path: str | None,
    suffix: str | None,
    seed: int,
) -> dict[str, Any]:
    """The JobSpec document for one fine-tuning request (validated by the submit path)."""
    d = model.defaults
    base_lr = d.get("training", {}).get("learning_rate", _DEFAULTS["learning_rate"])
    training: dict[str, Any] = {
        **d.get("training", {}),
        "num_train_epochs": hyperparameters["n_epochs"],
        "per_device_train_batch_size": hyperparameters["batch_size"],
        "learning_rate": base_lr * hyperparameters["learning_rate_multiplier"],
        "seed": seed,
        "save_strategy": "epoch",
    }
    data: dict[str, Any] = {
        **d.get("data", {}),
        "train": _source(training_path),
        "messages_field": "messages",
    }
    if validation_path is not None:
        data["eval"] = _source(validation_path)
        training["eval_strategy"] = "epoch"
    spec: dict[str, Any] = {
        "name": _job_name(model.id, suffix),
        "model": dict(model.model),
        "data": data,
        "training": training,
    }
    if "resources" in d:
        spec["resources"] = dict(d["resources"])
    if "distributed" in d:
        spec["distributed"] = dict(d["distributed"])
    return spec


def ft_job(job: Any, ft: Any) -> dict[str, Any]:
    """A ``fine_tuning.job`` object from a ``jobs`` row and its ``fine_tuning_jobs`` row."""
    status = ft_status(job.status)
    hp = dict(ft.hyperparameters)
    error = None
    if status == "failed":
        error = {
            "code": job.error_type or "failed",
            "message": job.error_message or "the job failed",
            "param": None,
        }
    return {
        "object": "fine_tuning.job",
        "id": ft_job_id(job.id),
        "model": ft.model,
        "created_at": _ts(job.created_at),
        "finished_at": _ts(job.finished_at),
        "fine_tuned_model": fine_tuned_model_name(ft.model, job.team, ft.suffix, job.id)
        if status == "succeeded"
        else None,
        "organization_id": job.team,
        "result_files": [],
        "status": status,
        "validation_file": ft.validation_file,
        "training_file": ft.training_file,
        "hyperparameters": hp,
        "trained_tokens": None,
        "error": error,
        "seed": ft.seed,
        "estimated_finish": _ts(getattr(job, "estimated_end_at", None)),
        "integrations": [],
        "metadata": ft.user_metadata,
        "user_provided_suffix": ft.suffix,
        "method": {"type": "supervised", "supervised": {"hyperparameters": hp}},
    }


def ft_event(event: Any) -> dict[str, Any]:
    """A ``fine_tuning.job.event`` from an ``events`` row."""
    level = "error" if event.to_status == "failed" else "info"
    text = event.message or event.type
    if event.to_status:
        text = f"{event.type} ({event.to_status}): {text}"
    return {
        "object": "fine_tuning.job.event",
        "id": f"ftevent-{event.id}",
        "created_at": _ts(event.time),
        "level": level,
        "message": text,
        "type": "message",
        "data": {"type": event.type, "to_status": event.to_status, "attempt": event.attempt},
    }


def ft_checkpoint(ckpt: Any, *, base: str, team: str, suffix: str | None) -> dict[str, Any]:
    """A ``fine_tuning.job.checkpoint`` from a ``checkpoints`` row."""
    m = ckpt.metrics or {}
    metrics = {"step": float(ckpt.step)}
    for ours, theirs in (("loss", "train_loss"), ("eval_loss", "valid_loss")):
        if isinstance(m.get(ours), int | float):
            metrics[theirs] = float(m[ours])
    return {
        "object": "fine_tuning.job.checkpoint",
        "id": f"ftckpt-{ckpt.id}",
        "created_at": _ts(ckpt.created_at),
        "fine_tuning_job_id": ft_job_id(ckpt.job_id),
        # Resolves (shunter.model_names.model_ref) to this step's model download.
        "fine_tuned_model_checkpoint": fine_tuned_model_name(
            base, team, suffix, ckpt.job_id, step=ckpt.step
        ),
        "step_number": ckpt.step,
        "metrics": metrics,
    }
