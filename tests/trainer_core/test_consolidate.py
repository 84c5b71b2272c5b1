"""A step checkpoint written by 2 ranks (FSDP2, DeepSpeed ZeRO-3 and ZeRO-0, TP; gloo,
multiprocessing) consolidates in one process into one ``model.safetensors`` that
``from_pretrained`` loads, and that model gives the eval loss the 2-rank run measured at
that step (1e-4).

``trainer_core.consolidate.export_checkpoint`` is what ``python -m trainer_core
export-checkpoint`` (the service's step-checkpoint download) runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.trainer_core.test_strategies_harness import TrainJob, spawn
from tests.trainer_core.test_strategies_train import _STRATEGIES, _corpus, _spec
from trainer_core import TrainConfig
from trainer_core.consolidate import export_checkpoint
from trainer_core.data import load_tokenized
from trainer_core.evaluation import evaluate as _evaluate
from trainer_core.parallel.torch_engine import TorchEngine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# ZeRO-0 keeps the whole module in rank 0's model states (no optimizer partitions): the
# other DeepSpeed read path.
STRATEGIES = {
    **_STRATEGIES,
    "deepspeed-zero0": {"strategy": "deepspeed", "deepspeed": {"stage": 0}},
}
NAMES = ["fsdp", "deepspeed-zero3", "deepspeed-zero0", "tp"]


def _with_eval(spec: dict[str, Any], corpus: Path) -> dict[str, Any]:
    spec["data"]["eval"] = {"path": str(corpus)}
    spec["training"].update(eval_strategy="steps", eval_steps=2)
    return spec


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("consolidate")
    corpus = _corpus(root / "corpus.txt")
    jobs = [
        TrainJob(
            name=n,
            spec=_with_eval(
                _spec(root / n, corpus, STRATEGIES[n], per_device=4 if n == "tp" else 2), corpus
            ),
        )
        for n in NAMES
    ]
    spawn(2, jobs, root)
    return root


def _eval_loss(folder: Path, spec: dict[str, Any], tmp: Path) -> float:
    model = AutoModelForCausalLM.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    cfg = TrainConfig.from_spec(spec)
    assert cfg.data.eval is not None
    ds = load_tokenized(
        cfg.data.eval, cfg.data, task="causal-lm", tokenizer=tokenizer, cache_root=tmp / "tok"
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    engine = TorchEngine(model=model, unwrapped=model, optimizer=opt, device=torch.device("cpu"))
    return _evaluate(engine, ds, cfg, tokenizer)["eval_loss"]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_two_rank_checkpoint_consolidates_to_one_model(name: str, runs: Path) -> None:
    run = runs / name
    evals = {
        int(r["step"]): float(r["eval_loss"])
        for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "eval_loss" in r
    }
    assert abs(evals[2] - evals[4]) > 1e-3  # the steps differ: the right one must be read
    out = export_checkpoint(
        TrainConfig.from_spec(_spec_of(run)).model, run / "checkpoint-2", run / "hf"
    )
    assert sorted(p.name for p in out.glob("*.safetensors")) == ["model.safetensors"]
    assert _eval_loss(out, _spec_of(run), run) == pytest.approx(evals[2], abs=1e-4)


def _spec_of(run: Path) -> dict[str, Any]:
    corpus = run.parent / "corpus.txt"
    name = run.name
    spec = _spec(run, corpus, STRATEGIES[name], per_device=4 if name == "tp" else 2)
    # One process reads it: the world size the spec is validated for is this one's.
    return _with_eval({**spec, "distributed": {"strategy": "ddp"}}, corpus)
