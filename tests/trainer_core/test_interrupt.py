"""Checkpoint-now (preemption, pause) at a step boundary, in process.

A run asked to stop after step 3 saves ``checkpoint-3`` even with ``save_strategy: no``, returns
``interrupted`` with no final model, and a second run in the same output dir resumes at step 4:
its losses match a straight run's to 1e-6 and the two runs together log every step once.
"""

from __future__ import annotations

import os
from pathlib import Path

from tc_helpers import losses, tiny_llama_spec, write_corpus

from trainer_core import JsonlReporter, TrainConfig, train

os.environ.setdefault("HF_HUB_OFFLINE", "1")


class _StopAfter(JsonlReporter):
    """Asks for a stop once ``n`` steps have been checked (one check per step boundary)."""

    def __init__(self, output_dir: Path, n: int) -> None:
        super().__init__(output_dir)
        self.checks, self.n = 0, n

    def stop_requested(self) -> str | None:
        self.checks += 1
        return "preempt: test" if self.checks >= self.n else None


def _spec(out: Path, corpus: Path) -> dict:
    spec = tiny_llama_spec(out, corpus, max_steps=6, save_strategy="no")
    spec["model"]["config_overrides"]["attention_dropout"] = 0.1  # the RNG state matters
    return spec


def test_stop_request_checkpoints_and_resume_loses_no_step(tmp_path: Path) -> None:
    corpus = write_corpus(tmp_path / "corpus.txt")
    straight = tmp_path / "straight"
    train(TrainConfig.from_spec(_spec(straight, corpus)), JsonlReporter(straight))

    run = tmp_path / "run"
    first = train(TrainConfig.from_spec(_spec(run, corpus)), _StopAfter(run, 3))
    assert first.interrupted == "preempt: test"
    assert first.global_step == 3 and first.final_model_dir is None
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-3"]
    assert not (run / "final").exists()
    assert sorted(losses(run)) == [1, 2, 3]

    second = train(TrainConfig.from_spec(_spec(run, corpus)), JsonlReporter(run))
    assert second.resumed_from == run / "checkpoint-3"
    assert second.interrupted is None and second.global_step == 6
    got, want = losses(run), losses(straight)
    assert sorted(got) == [1, 2, 3, 4, 5, 6]  # a point for every step, none twice
    for step in range(1, 7):
        assert abs(got[step] - want[step]) < 1e-6, (step, got[step], want[step])
