"""``save_final`` of an unmerged adapter over a from-scratch base: the final directory holds
that base too and loads with ``AutoPeftModelForCausalLM`` after being moved elsewhere."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from peft import AutoPeftModelForCausalLM, PeftModel
from tc_helpers import MINILM, TINY_LLAMA
from transformers import AutoModelForCausalLM

from trainer_core.config import ModelConfig
from trainer_core.export import BASE_DIR, relocate_adapter, save_final
from trainer_core.model import build_model, build_tokenizer

IDS = torch.tensor([[101, 1996, 4248, 2829, 4419, 102]])


class _SingleProcess:
    """The two things ``save_final`` asks of an engine, for one process."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.unwrapped = model

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.unwrapped.state_dict().items()}


def _cfg(**model: Any) -> ModelConfig:
    return ModelConfig.model_validate({"tokenizer": MINILM, "task": "causal-lm", **model})


def _logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


def _trained(cfg: ModelConfig) -> tuple[torch.nn.Module, Any]:
    tokenizer = build_tokenizer(cfg)
    model = build_model(cfg, tokenizer, seed=3).eval()
    with torch.no_grad():  # as if trained: the adapter is not its init
        for p in model.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.5)
    return model, tokenizer


PREFIX = {"peft": {"adapter": "prefix_tuning", "num_virtual_tokens": 4}}
LORA = {"lora": {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}}


@pytest.mark.parametrize("adapter", [PREFIX, LORA], ids=["prefix", "lora"])
def test_from_scratch_adapter_loads_after_a_move(tmp_path: Path, adapter: dict[str, Any]) -> None:
    cfg = _cfg(**adapter, from_scratch=True, config_overrides=TINY_LLAMA)
    model, tokenizer = _trained(cfg)
    saved = save_final(_SingleProcess(model), tokenizer, cfg, tmp_path / "cluster" / "final")
    base = saved / BASE_DIR
    assert (base / "config.json").exists() and (base / "model.safetensors").exists()
    assert not (saved / "config.json").exists()  # else transformers loads base + adapter as one
    config = json.loads((saved / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == str(base.resolve())

    moved = shutil.move(saved, tmp_path / "downloaded")
    shutil.rmtree(tmp_path / "cluster")  # the old location is gone, as after a download
    moved = Path(moved)
    # Without a rewrite: the plain base, then the adapter, both from the moved directory.
    base_model = AutoModelForCausalLM.from_pretrained(moved / BASE_DIR)
    plain = PeftModel.from_pretrained(base_model, moved)
    torch.testing.assert_close(_logits(plain.eval()), _logits(model))
    relocate_adapter(moved)
    loaded = AutoPeftModelForCausalLM.from_pretrained(moved).eval()
    torch.testing.assert_close(_logits(loaded), _logits(model))
    with loaded.disable_adapter():  # the adapter matters: the check above is not vacuous
        assert not torch.allclose(_logits(loaded), _logits(model))


def test_named_base_is_referenced_not_copied(tmp_path: Path) -> None:
    """A base with a name is not copied: the adapter names it."""
    base = tmp_path / "base"
    overrides = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    from transformers import AutoConfig

    AutoModelForCausalLM.from_config(
        AutoConfig.for_model("llama", vocab_size=30522, **overrides)
    ).save_pretrained(base)
    cfg = _cfg(**PREFIX, name_or_path=str(base))
    model, tokenizer = _trained(cfg)
    saved = save_final(_SingleProcess(model), tokenizer, cfg, tmp_path / "final")
    assert not (saved / BASE_DIR).exists()
    assert json.loads((saved / "adapter_config.json").read_text())[
        "base_model_name_or_path"
    ] == str(base)


@pytest.mark.parametrize("adapter", [{}, LORA], ids=["plain", "lora-merged"])
def test_a_causal_lm_trained_without_a_kv_cache_is_written_with_it(
    tmp_path: Path, adapter: dict[str, Any]
) -> None:
    """Training builds the model with ``use_cache=False``; the written model generates with
    the cache on (config and generation config), and the training model is unchanged."""
    if adapter:
        adapter = {"lora": {**adapter["lora"], "merge_on_save": True}}
    cfg = _cfg(from_scratch=True, config_overrides=TINY_LLAMA, **adapter)
    model, tokenizer = _trained(cfg)
    assert model.config.use_cache is False
    saved = save_final(_SingleProcess(model), tokenizer, cfg, tmp_path / "final")
    assert json.loads((saved / "config.json").read_text())["use_cache"] is True
    assert json.loads((saved / "generation_config.json").read_text()).get("use_cache", True)
    loaded = AutoModelForCausalLM.from_pretrained(saved)
    assert loaded.config.use_cache and loaded.generation_config.use_cache
    assert model.config.use_cache is False and model.generation_config.use_cache is False
