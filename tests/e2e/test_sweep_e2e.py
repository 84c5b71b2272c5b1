"""A sweep on real Ray: the SST-2 MiniLM classifier on the shipped slice, ASHA pruning, and a
service restart mid-sweep (issue 24).

Small on purpose (CI time): 3 trials over ``training.learning_rate`` (a grid of 3e-5, 0.5 and
0.3, in that order for seed 1), ``max_parallel`` 2, 12 steps of batch 8, one CPU worker each,
``eval_loss`` every 2 steps on 64 dev sentences; ASHA with rungs at steps 2, 4 and 8. The 0.3
trial starts after the 3e-5 one has evaluated (only two run at once) and diverges (eval_loss
~16 by step 4 against ~0.69), so ASHA prunes it at a rung before its last step (measured: at
step 4; at step 2 its loss had not blown up yet): it is stopped at its next step boundary
through the checkpoint-now request and ends ``pruned`` with that checkpoint kept (the steps
after the last rung leave the stop, which travels by heartbeat, time to land). The service
is stopped and started again (same database and port) while trials run: the sweep still ends
with exactly 3 trials and no duplicate parameters, and the best trial's model downloads.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from harness import MINILM_DIR, ApiServer, wait_for

pytestmark = pytest.mark.slow

SST2 = Path(__file__).resolve().parents[2] / "examples" / "data" / "sst2"
LRS = {3e-5, 0.5, 0.3}


def _slice(src: Path, dst: Path, rows: int) -> None:
    lines = src.read_text().splitlines()
    dst.write_text("\n".join(lines[: rows + 1]) + "\n")


def _sweep(data_root: Path) -> dict[str, Any]:
    _slice(SST2 / "train.tsv", data_root / "sst2-train.tsv", 400)
    _slice(SST2 / "dev.tsv", data_root / "sst2-dev.tsv", 64)
    base = {
        "name": "sst2-sweep",
        "model": {
            "name_or_path": str(MINILM_DIR),
            "task": "sequence-classification",
            "num_labels": 2,
        },
        "data": {
            "train": {"path": "sst2-train.tsv", "format": "csv", "delimiter": "\t"},
            "eval": {"path": "sst2-dev.tsv", "format": "csv", "delimiter": "\t"},
            "text_field": "sentence",
            "label_field": "label",
            "max_length": 32,
        },
        "training": {
            "max_steps": 12,
            "per_device_train_batch_size": 8,
            "per_device_eval_batch_size": 32,
            "logging_steps": 1,
            "eval_strategy": "steps",
            "eval_steps": 2,
            "save_steps": 2,
        },
        "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
    }
    return {
        "name": "sst2-lr",
        "base": base,
        "space": {
            "training.learning_rate": {"type": "categorical", "choices": [3e-5, 0.3, 0.5]},
        },
        "objective": "eval_loss",
        "direction": "minimize",
        "max_trials": 3,
        "max_parallel": 2,
        "sampler": "grid",
        "seed": 1,
        "pruner": "asha",
        "pruner_settings": {"min_resource": 2, "reduction_factor": 2},
    }


def _get(api: ApiServer, sweep_id: str) -> dict[str, Any]:
    r = api.api().get(f"/v1/sweeps/{sweep_id}")
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    api.submitted[:] = sorted({*api.submitted, *(t["job_id"] for t in out["trials"])})
    return out


def test_sweep_prunes_survives_a_restart_and_the_best_model_downloads(
    api: ApiServer, data_root: Path
) -> None:
    r = api.api().post("/v1/sweeps", json=_sweep(data_root))
    assert r.status_code == 201, r.text
    sweep_id = r.json()["id"]
    # Restart the service while the first two trials run.
    wait_for(
        lambda: sum(t["status"] == "running" for t in _get(api, sweep_id)["trials"]) >= 1,
        timeout=120,
        what="a trial to run",
    )
    api.restart()
    sweep: dict[str, Any] = wait_for(
        lambda: (s := _get(api, sweep_id))["status"] != "running" and s,
        timeout=300,
        what="the sweep to end",
        interval=1.0,
    )
    assert sweep["status"] == "succeeded", sweep
    for t in sweep["trials"]:  # shown with -s: what each trial did
        print(t["number"], t["params"], t["status"], t["objective"], t["pruned_at_step"])
    trials = sweep["trials"]
    assert len(trials) == 3
    assert {t["params"]["training.learning_rate"] for t in trials} == LRS  # no duplicates
    assert {t["status"] for t in trials} <= {"succeeded", "pruned"}, trials
    by_lr = {t["params"]["training.learning_rate"]: t for t in trials}
    # Never more than max_parallel trials unfinished at once.
    spans = []
    for t in trials:
        job = api.job(t["job_id"])
        spans.append((job["created_at"], job["finished_at"]))
    for created, _ in spans:
        assert sum(c <= created < f for c, f in spans) <= 2
    # The 0.3 trial is pruned at a rung before its last step, stopped at a later step
    # boundary, its checkpoint kept; the checkpoint-now request went through its heartbeat.
    pruned = by_lr[0.3]
    assert pruned["status"] == "pruned" and pruned["pruned_at_step"] in (2, 4, 8), pruned
    job = api.job(pruned["job_id"])
    assert job["error"] is None and job["resume_from"], job
    types = [e["type"] for e in api.events(pruned["job_id"])]
    assert "prune_requested" in types and types[-1] == "pruned", types
    assert any(c["verified"] for c in api.checkpoints(pruned["job_id"]))
    # The best trial is the finished one with the lowest final eval_loss: lr 3e-5.
    best = sweep["best_trial"]
    assert best["params"]["training.learning_rate"] == 3e-5 and best["status"] == "succeeded"
    done = [t for t in trials if t["status"] == "succeeded"]
    assert best["objective"] == min(t["objective"] for t in done)
    r = api.api().get(f"/v1/jobs/{best['job_id']}/checkpoints/final/download")
    assert r.status_code == 200, r.text[:300]
    with tarfile.open(fileobj=io.BytesIO(r.content)) as tar:
        names = tar.getnames()
    assert any(n.endswith("config.json") for n in names), names
