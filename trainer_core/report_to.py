"""``training.report_to``: copies of the loop's reports for TensorBoard and MLflow.

``with_trackers(reporter, cfg, rank=...)`` returns ``reporter`` itself when ``report_to`` is
empty or this is not rank 0; otherwise a ``Tracked`` reporter that forwards every report
unchanged (metrics always go to our own API first) and then writes the same numbers:

- ``tensorboard``: scalar events under ``<output_dir>/tensorboard/`` (the job's storage), one
  tag per metric name, step = optimizer step, written with ``torch.utils.tensorboard``'s
  ``SummaryWriter`` (the ``tensorboard`` package's event writer) and flushed every report.
- ``mlflow``: a run in the experiment named after the job (``MLFLOW_EXPERIMENT_NAME``, else
  ``shunter``) at ``MLFLOW_TRACKING_URI`` (the service sets it from
  ``SHUNTER_MLFLOW_TRACKING_URI``); the spec's sections as flattened params, every metric,
  and at the end the final model directory as the run's ``model`` artifacts.

``finish_trackers(reporter, final_dir, status)`` logs the final model and closes writers; a
no-op for a plain reporter. ``train`` calls it on every way out (``finally``); a tracker that
fails to start closes the ones already opened before the error propagates.

The packages are optional (``pip install shunter[tracking]``): asking for a tracker whose
package is missing raises ``TrackerMissing`` naming the extra, at start, before any step runs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from trainer_core.config import TrainConfig
from trainer_core.fetch import CheckpointFiles
from trainer_core.reporter import Reporter

__all__ = ["Tracked", "TrackerMissing", "finish_trackers", "with_trackers"]

log = logging.getLogger(__name__)
TENSORBOARD_DIR = "tensorboard"
_PARAM_MAX = 500  # MLflow's value limit is 6000 chars; long lists/dicts are cut to stay valid


class TrackerMissing(RuntimeError):
    """``report_to`` names a tracker whose package is not installed."""


class Tracked:
    """A reporter that also writes each report to the configured trackers (rank 0 only)."""

    def __init__(self, inner: Reporter, *, output_dir: Path, report_to: list[str]) -> None:
        self.inner = inner
        self.output_dir = output_dir
        self._tb: Any = None
        self._mlflow: Any = None
        if "tensorboard" in report_to:
            self._tb = _tensorboard_writer(output_dir / TENSORBOARD_DIR)
        if "mlflow" in report_to:
            try:
                mlflow = _mlflow_module()
                mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "shunter"))
                mlflow.start_run(run_name=output_dir.name)
            except BaseException:
                self.finish(None, "FAILED")  # the TensorBoard writer opened above
                raise
            self._mlflow = mlflow

    def log_params(self, params: dict[str, Any]) -> None:
        if self._mlflow is not None:
            flat = {k: str(v)[:_PARAM_MAX] for k, v in _flatten(params).items()}
            self._mlflow.log_params(flat)

    def report(
        self, step: int, metrics: dict[str, float], checkpoint_dir: Path | None = None
    ) -> None:
        self.inner.report(step, metrics, checkpoint_dir)
        if self._tb is not None:
            for name, value in metrics.items():
                self._tb.add_scalar(name, value, global_step=step)
            self._tb.flush()
        if self._mlflow is not None and metrics:
            self._mlflow.log_metrics(dict(metrics), step=step)

    def latest_checkpoint(self) -> Path | None:
        return self.inner.latest_checkpoint()

    def checkpoint_files(self, directory: Path) -> CheckpointFiles | None:
        return self.inner.checkpoint_files(directory)

    def __getattr__(self, name: str) -> Any:
        # Optional reporter extras (a stop request, ...) stay visible through the wrapper.
        return getattr(self.inner, name)

    def finish(self, final_dir: Path | None, status: str = "FINISHED") -> None:
        """Close the trackers (idempotent). ``status``: MLflow's run status, FINISHED, FAILED
        (an exception) or KILLED (stopped for a checkpoint-now request: preemption, pause)."""
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._mlflow is not None:
            mlflow, self._mlflow = self._mlflow, None
            try:
                if final_dir is not None and final_dir.is_dir():
                    mlflow.log_artifacts(str(final_dir), artifact_path="model")
            except BaseException:
                mlflow.end_run(status="FAILED")  # the run ends even when the upload fails
                raise
            mlflow.end_run(status=status)


def with_trackers(reporter: Reporter, cfg: TrainConfig, *, rank: int) -> Reporter:
    """``reporter`` wrapped for ``cfg.training.report_to`` on rank 0; itself otherwise."""
    report_to: list[str] = list(cfg.training.report_to)
    if not report_to or rank != 0:
        return reporter
    tracked = Tracked(reporter, output_dir=cfg.output_dir, report_to=report_to)
    try:
        tracked.log_params(
            {
                name: getattr(cfg, name).model_dump(mode="json")
                for name in ("model", "data", "training")
            }
        )
    except BaseException:
        tracked.finish(None, "FAILED")  # the caller never gets it to close
        raise
    log.info("reporting to %s", ", ".join(report_to))
    return tracked


def finish_trackers(reporter: Reporter, final_dir: Path | None, status: str = "FINISHED") -> None:
    if isinstance(reporter, Tracked):
        reporter.finish(final_dir, status)


def _tensorboard_writer(logdir: Path) -> Any:
    try:
        import tensorboard  # noqa: F401  (SummaryWriter needs it; fail with our message)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise TrackerMissing(
            "training.report_to has 'tensorboard' but the tensorboard package is not installed "
            "on the workers; install shunter[tracking] or drop it from report_to"
        ) from exc
    logdir.mkdir(parents=True, exist_ok=True)
    return SummaryWriter(log_dir=str(logdir))


def _mlflow_module() -> Any:
    try:
        import mlflow
    except ImportError as exc:
        raise TrackerMissing(
            "training.report_to has 'mlflow' but the mlflow package is not installed on the "
            "workers; install shunter[tracking] or drop it from report_to"
        ) from exc
    return mlflow


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out |= _flatten(value, f"{name}.")
        elif value is not None:
            out[name] = value
    return out
