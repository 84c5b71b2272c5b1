"""LoRA through peft: only adapter weights train; the saved adapter (or merged model) reloads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from peft import AutoPeftModelForCausalLM
from tc_helpers import MINILM, TINY_LLAMA, tiny_llama_spec, write_corpus
from transformers import AutoConfig, AutoModelForCausalLM

from trainer_core import JsonlReporter, TrainConfig, train
from trainer_core.model import build_model, build_tokenizer

os.environ.setdefault("HF_HUB_OFFLINE", "1")
LORA = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


@pytest.fixture(scope="module")
def base_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny 'pretrained' Llama on disk, so the adapter has a base to point at."""
    out = tmp_path_factory.mktemp("base")
    overrides = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    config = AutoConfig.for_model("llama", vocab_size=30522, **overrides)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)
    return out


def _spec(tmp_path: Path, base: Path, **lora: object) -> dict:
    spec = tiny_llama_spec(
        tmp_path / "run", write_corpus(tmp_path / "c.txt"), max_steps=3, learning_rate=1e-2
    )
    spec["model"] = {
        "name_or_path": str(base),
        "tokenizer": MINILM,
        "task": "causal-lm",
        "lora": {**LORA, **lora},
    }
    return spec


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([[101, 1996, 4248, 2829, 4419, 102]])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_only_adapter_weights_are_trainable(tmp_path: Path, base_dir: Path) -> None:
    cfg = TrainConfig.from_spec(_spec(tmp_path, base_dir))
    model = build_model(cfg.model, build_tokenizer(cfg.model), seed=0)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "v_proj"}


def test_adapter_trains_and_reloads(tmp_path: Path, base_dir: Path) -> None:
    result = train(TrainConfig.from_spec(_spec(tmp_path, base_dir)), JsonlReporter(tmp_path))
    final = result.final_model_dir
    assert (final / "adapter_config.json").exists() and not (final / "model.safetensors").exists()
    reloaded = AutoPeftModelForCausalLM.from_pretrained(final)
    lora_b = [p for n, p in reloaded.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.abs().sum() > 0 for p in lora_b)  # B starts at 0: it trained
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    assert not torch.allclose(_logits(reloaded), _logits(base))


def test_merge_on_save_writes_a_plain_model(tmp_path: Path, base_dir: Path) -> None:
    spec = _spec(tmp_path, base_dir, merge_on_save=True)
    result = train(TrainConfig.from_spec(spec), JsonlReporter(tmp_path))
    merged = AutoModelForCausalLM.from_pretrained(result.final_model_dir)
    assert not any("lora" in n for n, _ in merged.named_parameters())
    base = AutoModelForCausalLM.from_pretrained(base_dir)
    assert not torch.allclose(_logits(merged), _logits(base))
