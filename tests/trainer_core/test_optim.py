"""Optimizers by HF name, weight-decay grouping, Lion's update rule, warmup ratio."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM

from trainer_core.config import TrainingConfig
from trainer_core.optim import Lion, decay_groups, make_optimizer, make_scheduler


def _tiny_llama() -> nn.Module:
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        attention_bias=True,
    )
    return LlamaForCausalLM(cfg)


def test_no_decay_for_biases_and_norms() -> None:
    model = _tiny_llama()
    decay, no_decay = decay_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    decay_names = {names[id(p)] for p in decay["params"]}
    assert no_decay["weight_decay"] == 0.0 and decay["weight_decay"] == 0.1
    assert no_decay_names == {n for n in names.values() if n.endswith("bias") or "norm" in n}
    assert "model.layers.0.self_attn.q_proj.weight" in decay_names
    assert "model.embed_tokens.weight" in decay_names  # HF decays embeddings too
    # Frozen parameters are not handed to the optimizer at all.
    model.lm_head.weight.requires_grad_(False)
    total = sum(len(g["params"]) for g in decay_groups(model, 0.1))
    assert total == sum(1 for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("name", ["adamw_torch", "adamw_torch_fused", "adafactor", "sgd", "lion"])
def test_each_optimizer_reduces_a_quadratic(name: str) -> None:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    opt = make_optimizer(model, TrainingConfig(optim=name, learning_rate=1e-2))
    first = None
    for _ in range(30):
        loss = nn.functional.mse_loss(model(x), y)
        first = first if first is not None else loss.item()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < first


def test_lion_matches_its_update_rule() -> None:
    p = nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = Lion([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.5)
    g1, g2 = torch.tensor([0.3, -0.1, 0.0]), torch.tensor([-0.2, -0.4, 0.1])
    m = torch.zeros(3)
    expected = p.detach().clone()
    for g in (g1, g2):
        p.grad = g.clone()
        opt.step()
        expected = expected * (1 - 0.1 * 0.5) - 0.1 * torch.sign(0.9 * m + 0.1 * g)
        m = 0.99 * m + 0.01 * g
    torch.testing.assert_close(p.detach(), expected)


def test_warmup_ratio_becomes_steps_and_linear_decays() -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make_scheduler(opt, TrainingConfig(warmup_ratio=0.25), total_steps=8)
    lrs = []
    for _ in range(8):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([0.0, 0.5, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])


def test_reduce_lr_on_plateau_is_a_plateau_scheduler() -> None:
    opt = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make_scheduler(opt, TrainingConfig(lr_scheduler_type="reduce_lr_on_plateau"), 10)
    assert isinstance(sched, torch.optim.lr_scheduler.ReduceLROnPlateau)
    for _ in range(12):
        sched.step(1.0)  # no improvement
    assert opt.param_groups[0]["lr"] < 1.0


@pytest.mark.parametrize(
    "name",
    ["linear", "cosine", "constant", "constant_with_warmup", "polynomial", "cosine_with_restarts"],
)
@pytest.mark.parametrize("warmup", [0, 3])
def test_schedules_are_hf_get_schedulers(name: str, warmup: int) -> None:
    """Our copy of HF's schedules (no transformers.trainer_utils import): the same learning
    rate at every step, past the end too, and a state dict either side loads."""
    from transformers import get_scheduler

    def opt() -> torch.optim.Optimizer:
        return torch.optim.SGD([nn.Parameter(torch.zeros(2))], lr=3e-4)

    total = 11
    cfg = TrainingConfig(lr_scheduler_type=name, warmup_steps=warmup, learning_rate=3e-4)
    ours, theirs = opt(), opt()
    ours_s = make_scheduler(ours, cfg, total)
    hf_s = get_scheduler(name, theirs, num_warmup_steps=warmup, num_training_steps=total)
    for _ in range(total + 3):
        assert ours.param_groups[0]["lr"] == theirs.param_groups[0]["lr"]
        ours.step(), theirs.step()
        ours_s.step(), hf_s.step()
    again = opt()
    resumed = make_scheduler(again, cfg, total)
    resumed.load_state_dict(hf_s.state_dict())  # an HF-made state (old checkpoints) loads
    assert resumed.get_last_lr() == hf_s.get_last_lr()
    resumed.step(), hf_s.step()
    assert again.param_groups[0]["lr"] == theirs.param_groups[0]["lr"]


def test_trainer_core_imports_no_peft_or_deepspeed(tmp_path: Path) -> None:
    """transformers.trainer_utils (set_seed, get_scheduler) pulls PEFT, DeepSpeed, MLflow,
    accelerate's trackers, and save_pretrained's unwrap asks accelerate, which imports
    DeepSpeed: seconds per job that uses none of them (issue #33). A fresh interpreter
    imports the loop and writes a (tiny) final model the way the loop does."""
    import subprocess
    import sys

    from tc_helpers import MINILM

    code = f"""
import sys
import trainer_core.__main__, trainer_core.loop
from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification
from shunter.jobspec import ModelSpec
from trainer_core.export import write_model
model = BertForSequenceClassification(BertConfig(hidden_size=8, num_hidden_layers=1,
    num_attention_heads=2, intermediate_size=8, vocab_size=30522))
cfg = ModelSpec.model_validate({{"name_or_path": {MINILM!r}, "task": "sequence-classification"}})
write_model(model, model.state_dict(), AutoTokenizer.from_pretrained({MINILM!r}), cfg,
    __import__("pathlib").Path({str(tmp_path / "final")!r}))
bad = [m for m in ("peft", "deepspeed", "mlflow", "ray", "service", "tensorboard",
    "transformers.trainer_utils", "bitsandbytes") if m in sys.modules]
print("BAD=" + ",".join(bad))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "BAD=\n" in out.stdout, out.stdout[-2000:]
    assert (tmp_path / "final" / "model.safetensors").exists()
