"""``training.report_to``: TensorBoard event files and an MLflow run (local file store) hold
the same loss values the reporter (our API's feed) got. Skipped when a package is absent."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tc_helpers import tiny_llama_spec, write_corpus

from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.report_to import TENSORBOARD_DIR, TrackerMissing, with_trackers

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _run(tmp_path: Path, report_to: list[str], steps: int = 3) -> tuple[Path, dict[int, float]]:
    out = tmp_path / "job"
    spec = tiny_llama_spec(out, write_corpus(tmp_path / "c.txt"), max_steps=steps)
    spec["training"]["report_to"] = report_to
    reporter = JsonlReporter(out)
    train(TrainConfig.from_spec(spec), reporter)
    sent = {int(r["step"]): float(r["loss"]) for r in reporter.records if "loss" in r}  # type: ignore[call-overload, arg-type]
    assert sorted(sent) == list(range(1, steps + 1))
    return out, sent


def test_tensorboard_events_hold_the_reported_losses(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, sent = _run(tmp_path, ["tensorboard"])
    events = list((out / TENSORBOARD_DIR).glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(out / TENSORBOARD_DIR))
    acc.Reload()
    assert {"loss", "learning_rate", "train_runtime_s"} <= set(acc.Tags()["scalars"])
    got = {e.step: e.value for e in acc.Scalars("loss")}
    # Event files store float32: the same number, rounded once.
    assert got == {step: float(np.float32(v)) for step, v in sent.items()}


def test_mlflow_run_has_params_metrics_and_final_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mlflow = pytest.importorskip("mlflow")
    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 deprecates it; fine here
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "report-to-test")
    out, sent = _run(tmp_path, ["mlflow"])
    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name("report-to-test")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == out.name
    assert run.data.params["model.task"] == "causal-lm"
    assert run.data.params["training.max_steps"] == "3"
    history = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "loss")}
    assert history == sent
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "model")}
    assert "model/config.json" in artifacts


def test_missing_tracker_package_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name: str, *args: object, **kwargs: object) -> object:
        if name == "tensorboard" or name.startswith("tensorboard."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    spec = tiny_llama_spec(tmp_path / "job", write_corpus(tmp_path / "c.txt"))
    spec["training"]["report_to"] = ["tensorboard"]
    cfg = TrainConfig.from_spec(spec)
    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    with pytest.raises(TrackerMissing, match=r"shunter\[tracking\]"):
        with_trackers(JsonlReporter(tmp_path / "job"), cfg, rank=0)
    # Other ranks never write, so they need nothing installed.
    plain = JsonlReporter(tmp_path / "job")
    assert with_trackers(plain, cfg, rank=1) is plain


class _StopAfterOne(JsonlReporter):
    def stop_requested(self) -> str | None:
        return "preempt: test"


@pytest.mark.parametrize("way_out", ["exception", "preemption"])
def test_trackers_are_closed_on_every_way_out(
    way_out: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception (here the divergence guard giving up) ends the MLflow run FAILED, a
    checkpoint-now stop ends it KILLED; the TensorBoard writer is closed either way."""
    mlflow = pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    from trainer_core import report_to
    from trainer_core.health import Diverged

    store = tmp_path / "mlruns"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store.as_uri())
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", f"ways-out-{way_out}")
    closed: list[Any] = []
    real = report_to._tensorboard_writer

    def spy(logdir: Path) -> Any:
        writer = real(logdir)
        close = writer.close
        writer.close = lambda: (closed.append(logdir), close())[1]
        return writer

    monkeypatch.setattr(report_to, "_tensorboard_writer", spy)
    out = tmp_path / "job"
    corpus = write_corpus(tmp_path / "c.txt")
    spec = tiny_llama_spec(out, corpus, max_steps=50, save_strategy="steps", save_steps=2)
    spec["training"]["report_to"] = ["tensorboard", "mlflow"]
    if way_out == "exception":
        spec["training"].update(
            optim="sgd", learning_rate=10.0, max_grad_norm=0.0, lr_scheduler_type="constant"
        )
        spec["health"] = {"divergence": {"max_skips": 1, "max_rollbacks": 0}}
        with pytest.raises(Diverged):
            train(TrainConfig.from_spec(spec), JsonlReporter(out))
    else:
        result = train(TrainConfig.from_spec(spec), _StopAfterOne(out))
        assert result.interrupted == "preempt: test"
    assert closed == [out / TENSORBOARD_DIR]
    client = mlflow.tracking.MlflowClient(tracking_uri=store.as_uri())
    experiment = client.get_experiment_by_name(f"ways-out-{way_out}")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == {"exception": "FAILED", "preemption": "KILLED"}[way_out]


class _FakeMlflow:
    """Records calls; raises at ``fail_at`` (a tracker that cannot start)."""

    def __init__(self, fail_at: str) -> None:
        self.fail_at = fail_at
        self.calls: list[Any] = []

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name == self.fail_at:
            raise RuntimeError(f"mlflow {name} failed")

    def set_experiment(self, name: str) -> None:
        self._call("set_experiment")

    def start_run(self, run_name: str) -> None:
        self._call("start_run")

    def log_params(self, params: dict[str, Any]) -> None:
        self._call("log_params")

    def log_artifacts(self, path: str, artifact_path: str) -> None:
        self._call("log_artifacts")

    def end_run(self, status: str) -> None:
        self.calls.append(("end_run", status))


@pytest.mark.parametrize("fail_at", ["start_run", "log_params", "log_artifacts"])
def test_a_tracker_that_fails_closes_the_others(
    fail_at: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow failing to start (or to take the params) leaves no TensorBoard writer open and
    no run active; failing to upload the final model still ends the run, FAILED."""
    pytest.importorskip("tensorboard")
    from trainer_core import report_to

    closed: list[Path] = []
    real = report_to._tensorboard_writer

    def spy(logdir: Path) -> Any:
        writer = real(logdir)
        close = writer.close
        writer.close = lambda: (closed.append(logdir), close())[1]
        return writer

    fake = _FakeMlflow(fail_at)
    monkeypatch.setattr(report_to, "_tensorboard_writer", spy)
    monkeypatch.setattr(report_to, "_mlflow_module", lambda: fake)
    out = tmp_path / "job"
    spec = tiny_llama_spec(out, write_corpus(tmp_path / "c.txt"))
    spec["training"]["report_to"] = ["tensorboard", "mlflow"]
    cfg = TrainConfig.from_spec(spec)
    with pytest.raises(RuntimeError, match=fail_at):
        tracked = with_trackers(JsonlReporter(out), cfg, rank=0)
        (out / "final").mkdir()
        report_to.finish_trackers(tracked, out / "final")
    assert closed == [out / TENSORBOARD_DIR]
    ended = [c for c in fake.calls if isinstance(c, tuple)]
    assert ended == ([] if fail_at == "start_run" else [("end_run", "FAILED")])
