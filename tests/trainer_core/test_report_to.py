"""``training.report_to``: TensorBoard event files and an MLflow run (local file store) hold
the same loss values the reporter (our API's feed) got. Skipped when a package is absent."""

from __future__ import annotations

import os
from pathlib import Path

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
