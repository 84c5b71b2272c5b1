"""Pipeline parallelism through the real training loop (``trainer_core.train``, what a job
runs), 4 CPU processes under ``torchrun`` (gloo), on a ``dp x pp`` = 2 x 2 mesh.

One launch runs the cases in turn in the same processes (``test_matrix``'s runner): the
matrix's tiny Llama (2 decoder layers, one per stage) for 8 steps of 8 rows (DDP: 4 ranks x
batch 1 x accumulation 2; pipeline: 2 replicas x batch 2 x accumulation 2), checkpointing at
step 4. 1F1B with 2 micro-batches and GPipe with 4 must report DDP's losses to 1e-4. Then
each layout resumes the other's step-4 checkpoint (``model.init_from`` with ``resume``:
weights, Adam moments, schedule, data position) and steps 5-8 must equal DDP's. A pipeline
checkpoint (one DCP shard set written by the stages together) consolidates into the
final-model layout with the same weights as DDP's, and the pipeline's final model loads as
a plain Hugging Face model. Every spec is first accepted by ``shunter.jobspec.check``.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.trainer_core.test_matrix import _data, _launch, _losses, _spec

TOL = 1e-4
STEPS, SAVED_AT = 8, 4
_PP = {"strategy": "ddp", "pipeline_parallel_size": 2}


def _case(root: Path, name: str, *, per_device: int, distributed: dict[str, Any]) -> dict[str, Any]:
    spec = _spec(root, name, "llama", 4, per_device=per_device, distributed=distributed)
    spec["training"] |= {"max_steps": STEPS, "save_strategy": "steps", "save_steps": SAVED_AT}
    return spec


def _resumed(spec: dict[str, Any], name: str, root: Path, source: str) -> dict[str, Any]:
    """``spec`` under a new name, continuing ``source``'s step-4 checkpoint exactly."""
    out = copy.deepcopy(spec)
    out["name"] = name
    out["training"]["output_dir"] = str(root / name)
    ckpt = root / source / f"checkpoint-{SAVED_AT}"
    out["model"]["init_from"] = {"job": "job-0source", "resume": True, "path": str(ckpt)}
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    from shunter.jobspec import check

    root = tmp_path_factory.mktemp("pp-loop")
    _data(root)
    ddp = _case(root, "ddp-4", per_device=1, distributed={"strategy": "ddp"})
    pp = _case(root, "pp-1f1b", per_device=2, distributed=_PP)
    gpipe_pp = {**_PP, "pipeline_schedule": "gpipe", "pipeline_microbatches": 4}
    gpipe = _case(root, "pp-gpipe", per_device=2, distributed=gpipe_pp)
    first = [ddp, pp, gpipe]
    for spec in first:  # accepted by the API (pass 1; the output dir is ours here)
        api_spec = copy.deepcopy(spec)
        api_spec["training"]["output_dir"] = None
        _, errors = check(api_spec)
        assert not errors, (spec["name"], errors)
    then = [_resumed(ddp, "pp-to-ddp", root, "pp-1f1b"), _resumed(pp, "ddp-to-pp", root, "ddp-4")]
    return root, _launch(4, first + then, root)


def _close(got: list[float], want: list[float]) -> bool:
    return len(got) == len(want) and all(abs(g - w) <= TOL for g, w in zip(got, want, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pp-1f1b", "pp-gpipe"])
def test_pipeline_equals_ddp(name: str, runs: tuple[Path, dict[str, Any]]) -> None:
    root, results = runs
    assert results[name] == {**results[name], "steps": STEPS}, results[name]
    want = _losses(root, "ddp-4")
    assert len(want) == STEPS and want[-1] < want[0] - 0.5, want  # it learns
    assert _close(_losses(root, name), want), (_losses(root, name), want)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pp-to-ddp", "ddp-to-pp"])
def test_resume_on_the_other_layout_continues_at_the_next_step(
    name: str, runs: tuple[Path, dict[str, Any]]
) -> None:
    root, results = runs
    assert results[name] == {**results[name], "steps": STEPS}, results[name]
    lines = (root / name / "metrics.jsonl").read_text().splitlines()
    steps = sorted({int(r["step"]) for r in map(json.loads, lines) if "loss" in r})
    assert steps == list(range(SAVED_AT + 1, STEPS + 1)), steps
    got, want = _losses(root, name), _losses(root, "ddp-4")[SAVED_AT:]
    assert _close(got, want), (got, want)


@pytest.mark.slow
def test_pipeline_checkpoint_and_final_model_consolidate(
    runs: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from trainer_core.config import TrainConfig
    from trainer_core.consolidate import export_checkpoint

    root, _ = runs
    spec = json.loads((root / "cases-4.json").read_text())[0]  # every case's model section
    model_cfg = TrainConfig.from_spec(spec).model  # (DDP's spec: valid in one process)
    ckpt = f"checkpoint-{SAVED_AT}"
    got = export_checkpoint(model_cfg, root / "pp-1f1b" / ckpt, tmp_path / "pp")
    want = export_checkpoint(model_cfg, root / "ddp-4" / ckpt, tmp_path / "ddp")
    have, ref = load_file(got / "model.safetensors"), load_file(want / "model.safetensors")
    assert sorted(have) == sorted(ref) and len(ref) > 10
    for key, value in ref.items():
        torch.testing.assert_close(have[key], value, atol=1e-5, rtol=1e-4, msg=key)
    final = root / "pp-1f1b" / "final"
    loaded = AutoModelForCausalLM.from_pretrained(final)  # a whole model, every stage's weights
    ddp_final = load_file(root / "ddp-4" / "final" / "model.safetensors")
    for key, value in loaded.state_dict().items():
        if key in ddp_final:
            torch.testing.assert_close(value, ddp_final[key], atol=1e-4, rtol=1e-3, msg=key)
    assert set(ddp_final) <= set(loaded.state_dict())
