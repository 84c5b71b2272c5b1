"""``worker.ray_trainer.ShunterTrainer``: the callbacks Ray Train would start that we leave out."""

from __future__ import annotations

from pathlib import Path

from ray.train import RunConfig, ScalingConfig

from worker.ray_trainer import ShunterTrainer, TorchEnvConfig


def _callbacks(tmp_path: Path) -> set[str]:
    trainer = ShunterTrainer(
        lambda config: None,
        backend_config=TorchEnvConfig(),
        scaling_config=ScalingConfig(num_workers=2),
        run_config=RunConfig(name="run", storage_path=str(tmp_path)),
    )
    return {type(cb).__name__ for cb in trainer._create_default_callbacks()}


def test_no_placement_group_cleaner_and_no_dataset_manager(tmp_path: Path) -> None:
    names = _callbacks(tmp_path)
    assert "BackendSetupCallback" in names  # the torchrun environment still reaches workers
    assert "PlacementGroupCleanerCallback" not in names  # a process per start, never needed
    assert "DatasetsCallback" not in names  # no Ray Datasets: no DatasetManager actor
