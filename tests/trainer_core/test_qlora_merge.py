"""QLoRA's ``merge_on_save`` (issue #29): adapters merged into the de-quantized base give the
trained (quantized) model's outputs, as a plain float model that loads without bitsandbytes.

bitsandbytes' CPU backend runs 4-bit layers, so this runs here: the trainer loads a quantized
base onto its GPU (``device_map``), which the test points at the CPU. The GPU set
(tests/gpu/test_gpu_optim.py) does the same on a 1.1B model on CUDA.
"""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes is not installed"
)


def test_merged_model_equals_the_trained_quantized_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    import trainer_core.model as model_mod
    from shunter.jobspec import validate
    from trainer_core.export import dequantized_merged_copy

    torch.manual_seed(0)
    base = LlamaForCausalLM(
        LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    )  # fmt: skip
    base.to(torch.bfloat16).save_pretrained(tmp_path / "base")  # type: ignore[arg-type]
    spec = validate(
        {
            "name": "qlora",
            "model": {
                "name_or_path": str(tmp_path / "base"),
                "task": "causal-lm",
                "dtype": "bfloat16",
                "lora": {"r": 8, "target_modules": "all-linear", "merge_on_save": True},
                "quantization": {"bits": 4, "double_quant": True},
            },
            "data": {"train": "train.jsonl"},
            "resources": {"num_workers": 1, "gpus_per_worker": 1},
        }
    )
    on_gpu = model_mod.quantization_kwargs

    def on_cpu(cfg: Any) -> dict[str, Any]:
        return {**on_gpu(cfg), "device_map": {"": "cpu"}}

    monkeypatch.setattr(model_mod, "quantization_kwargs", on_cpu)
    model: Any = model_mod.build_model(spec.model, types.SimpleNamespace(pad_token_id=0), seed=0)  # type: ignore[arg-type]
    from bitsandbytes.nn import Linear4bit  # type: ignore[attr-defined]

    assert sum(isinstance(m, Linear4bit) for m in model.modules()) == 14  # 7 linears x 2 layers
    # Trained adapters: B is zero at init, which would make any merge look right.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        trained = model(input_ids=ids, labels=ids).loss.item()

    merged = dequantized_merged_copy(model, model.state_dict(), spec.model)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got = merged(input_ids=ids, labels=ids).loss.item()
    assert abs(got - trained) <= 1e-3 * trained, (got, trained)
    # Merged into the de-quantized base, not the original float one: that one differs.
    unmerged = LlamaForCausalLM.from_pretrained(tmp_path / "base")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        original = unmerged(input_ids=ids, labels=ids).loss.item()
    assert abs(original - trained) > 10 * abs(got - trained)

    merged.save_pretrained(tmp_path / "final")
    assert "quantization_config" not in (tmp_path / "final" / "config.json").read_text()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    assert next(loaded.parameters()).dtype == torch.bfloat16
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        again = loaded(input_ids=ids, labels=ids).loss.item()
    assert abs(again - trained) <= 1e-3 * trained, (again, trained)
