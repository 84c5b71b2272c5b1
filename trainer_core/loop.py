"""``train(cfg, reporter)``: the training loop, top to bottom.

build → resume → for step: train_step → maybe eval → maybe checkpoint → report → final model.

Numerics (the contract the tests hold):
- One optimizer step consumes ``gradient_accumulation_steps`` micro-batches of the stream
  (the stream runs across epoch boundaries, so windows are always full except the very last).
- Loss = sum over the window's target tokens (labels != -100, after the causal shift; for
  sequence classification, samples) of the token cross-entropy, divided by the window's
  target count summed over data-parallel ranks. Each micro-step backpropagates its summed
  loss x dp_size / global_count, because DDP/FSDP *average* gradients over ranks. So
  accum 4 x batch 2 gives the same gradient as accum 1 x batch 8, and 2 ranks x batch 4 the
  same as 1 rank x batch 8, whatever the sequence lengths.
- No host-device sync per step: losses, counts and grad norms stay on the device and are read
  once per logging step (one packed all-reduce, one ``.item()`` chain).
"""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers import set_seed

from trainer_core.checkpoint import (
    latest_verified,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
    verify_checkpoint,
)
from trainer_core.config import TrainConfig
from trainer_core.data import (
    BatchOrder,
    eval_batches,
    load_tokenized,
    make_collator,
    row_lengths,
)
from trainer_core.engine import Engine
from trainer_core.export import save_final
from trainer_core.model import build_model, build_tokenizer
from trainer_core.optim import make_optimizer, make_scheduler
from trainer_core.parallel import build_engine, init_distributed
from trainer_core.reporter import Reporter

__all__ = ["TrainResult", "train"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    global_step: int
    train_loss: float  # mean of the per-step losses of this run (since resume)
    train_runtime_s: float  # the step loop only, not model/data building
    train_samples_per_second: float
    metrics: dict[str, float]  # the last eval's metrics ({} without eval)
    final_model_dir: Path
    best_checkpoint: Path | None
    resumed_from: Path | None
    stopped_early: bool


@dataclass(kw_only=True)
class _State:
    """Everything besides engine/scheduler/RNG that a checkpoint must restore."""

    step: int = 0
    epoch: int = 0  # data position of the next micro-batch
    batch: int = 0
    best_metric: float | None = None
    best_step: int | None = None
    bad_evals: int = 0  # evals since the best one (early stopping)
    world_size: int = 1


def train(cfg: TrainConfig, reporter: Reporter) -> TrainResult:
    tc = cfg.training
    task = cfg.model.task
    # ---- build -----------------------------------------------------------------------
    dist_info = init_distributed()
    set_seed(tc.seed)  # python, numpy, torch: same init on every rank
    tokenizer = build_tokenizer(cfg.model)
    model = build_model(cfg.model, tokenizer, seed=tc.seed)
    cache = cfg.tokenized_cache
    train_ds = load_tokenized(
        cfg.data.train, cfg.data, task=task, tokenizer=tokenizer, cache_root=cache
    )
    eval_ds = None
    if cfg.data.eval is not None:
        eval_ds = load_tokenized(
            cfg.data.eval, cfg.data, task=task, tokenizer=tokenizer, cache_root=cache
        )
    collate = make_collator(task, tokenizer, seed=tc.seed + dist_info.rank)
    base_optimizer: list[torch.optim.Optimizer] = []  # the torch optimizer the scheduler drives

    def _make_optimizer(module: torch.nn.Module) -> torch.optim.Optimizer:
        base_optimizer.append(make_optimizer(module, tc))
        return base_optimizer[-1]

    engine = build_engine(
        model, cfg.parallel, make_optimizer=_make_optimizer, device=dist_info.device
    )
    lengths = row_lengths(train_ds) if tc.group_by_length else None
    order = BatchOrder(
        len(train_ds),
        batch_size=tc.per_device_train_batch_size,
        seed=tc.seed,
        dp_rank=engine.dp_rank,
        dp_size=engine.dp_size,
        lengths=lengths,
    )
    accum = tc.gradient_accumulation_steps
    total_steps = (
        tc.max_steps if tc.max_steps > 0 else math.ceil(tc.num_train_epochs * len(order) / accum)
    )
    num_epochs = None if tc.max_steps > 0 else math.ceil(tc.num_train_epochs)
    scheduler = make_scheduler(base_optimizer[0], tc, total_steps)
    generator = getattr(collate, "generator", None)

    # ---- resume ----------------------------------------------------------------------
    state = _State(world_size=dist_info.world_size)
    resumed_from = _pick_resume(reporter, cfg.output_dir)
    if resumed_from is not None:
        saved = load_checkpoint(resumed_from, engine, scheduler=scheduler, generator=generator)
        state = _State(**{**saved, "world_size": dist_info.world_size})
        log.info("resumed from %s at step %d", resumed_from, state.step)

    # ---- loop ------------------------------------------------------------------------
    stream = order.iterate(state.epoch, state.batch, num_epochs)
    engine.model.train()
    meter = _Meter(engine.device)
    metrics: dict[str, float] = {}
    stopped_early = False
    loop_start = time.perf_counter()
    start_step = state.step
    for step in range(state.step + 1, total_steps + 1):
        window = list(islice(stream, accum))
        if not window:
            break  # epochs exhausted before total_steps (fractional last window)
        lr = base_optimizer[0].param_groups[0]["lr"]  # python float: no sync
        _train_step(
            engine, [ix for _, _, ix in window], train_ds, collate, task, tc.clip_norm, meter
        )
        if tc.lr_scheduler_type != "reduce_lr_on_plateau":
            scheduler.step()
        last_epoch, last_batch, _ = window[-1]
        state.step, state.epoch, state.batch = step, last_epoch, last_batch + 1
        epoch_done = any(b == len(order) - 1 for _, b, _ in window)
        evaluated = eval_ds is not None and _due(tc.eval_strategy, tc.eval_every, step, epoch_done)
        if evaluated:
            eval_start = time.perf_counter()
            metrics = _evaluate(engine, eval_ds, cfg, tokenizer)
            stopped_early = _update_best(state, metrics, cfg, scheduler)
            meter.t0 += time.perf_counter() - eval_start  # step_time_s counts training only
        last = step == total_steps or stopped_early
        out: dict[str, float] = {}
        if step % tc.logging_steps == 0 or last:
            out |= meter.flush(engine, lr=lr, epoch=last_epoch + (last_batch + 1) / len(order))
        if evaluated:
            out |= metrics
        ckpt = None
        if tc.save_strategy != "no" and (
            _due(tc.save_strategy, tc.save_steps, step, epoch_done) or last
        ):
            ckpt = save_checkpoint(
                cfg.output_dir,
                step,
                engine,
                scheduler=scheduler,
                trainer_state=vars(state),
                generator=generator,
            )
            prune_checkpoints(cfg.output_dir, tc.save_total_limit, _best_dir(cfg, state))
        if out or ckpt is not None:
            reporter.report(step, out, checkpoint_dir=ckpt)
        if stopped_early:
            break
    runtime = time.perf_counter() - loop_start

    # ---- final model -----------------------------------------------------------------
    best = _best_dir(cfg, state)
    if tc.load_best_model_at_end and best is not None and best.exists():
        engine.load(best)
    final_dir = save_final(engine, tokenizer, cfg.model, cfg.output_dir / "final")
    steps_run = state.step - start_step
    summary = {
        "train_loss": meter.run_loss / max(meter.run_steps, 1),
        "train_runtime_s": runtime,
        "train_samples_per_second": meter.run_samples / runtime if runtime > 0 else 0.0,
        "steps_run": float(steps_run),
    }
    reporter.report(state.step, summary)
    return TrainResult(
        global_step=state.step,
        train_loss=summary["train_loss"],
        train_runtime_s=runtime,
        train_samples_per_second=summary["train_samples_per_second"],
        metrics=metrics,
        final_model_dir=final_dir,
        best_checkpoint=best,
        resumed_from=resumed_from,
        stopped_early=stopped_early,
    )


# -------------------------------------------------------------------- one optimizer step


def _train_step(
    engine: Engine,
    window: list[list[int]],
    ds: Any,
    collate: Any,
    task: str,
    max_grad_norm: float | None,
    meter: _Meter,
) -> None:
    # Collate the whole window first: its global target count normalises every micro-step.
    batches = [collate(_rows(ds, indices)) for indices in window]
    local_count = sum(_target_count(b["labels"], task) for b in batches)  # CPU ints: no sync
    count = torch.tensor(float(local_count), device=engine.device)
    global_count = engine.reduce_sum(count).clamp_(min=1.0)  # collective, stays on device
    scale = engine.dp_size / global_count  # DDP/FSDP average grads over dp ranks; undo that
    loss_sum = torch.zeros((), device=engine.device)
    for i, batch in enumerate(batches):
        batch = {k: v.to(engine.device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        final = i == len(batches) - 1
        with contextlib.nullcontext() if final else engine.no_sync():
            logits = engine.forward(**batch).logits
            summed, _, _ = _loss_terms(logits, labels, task)
            engine.backward(summed * scale)
        loss_sum += summed.detach()
    grad_norm = engine.clip_and_step(max_grad_norm)
    samples = sum(len(ix) for ix in window)
    tokens = sum(int(b["attention_mask"].sum()) for b in batches)  # CPU tensors: no sync
    meter.add(loss_sum / global_count, grad_norm, samples=samples, tokens=tokens)


def _rows(ds: Any, indices: list[int]) -> list[dict[str, Any]]:
    cols = ds[indices]  # one Arrow slice for the batch instead of one lookup per row
    return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]


def _target_count(labels: torch.Tensor, task: str) -> int:
    if task == "causal-lm":
        labels = labels[:, 1:]
    return int((labels != -100).sum())


def _loss_terms(
    logits: torch.Tensor, labels: torch.Tensor, task: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, target count, correct predictions), all 0-dim device tensors."""
    if task == "causal-lm":  # position t predicts token t+1
        logits, labels = logits[:, :-1], labels[:, 1:]
    flat = logits.reshape(-1, logits.size(-1)).float()
    target = labels.reshape(-1)
    summed = F.cross_entropy(flat, target, ignore_index=-100, reduction="sum")
    valid = target != -100
    correct = ((flat.argmax(-1) == target) & valid).sum()
    return summed, valid.sum(), correct


# -------------------------------------------------------------------- logging


class _Meter:
    """Device-side accumulators between logging steps; ``flush`` is the only sync point."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.loss = torch.zeros((), device=device)  # sum of per-step mean losses (local part)
        self.grad_norm = torch.zeros((), device=device)
        self.steps = self.samples = self.tokens = 0
        self.run_loss, self.run_steps, self.run_samples = 0.0, 0, 0
        self.t0 = time.perf_counter()

    def add(
        self, loss: torch.Tensor, grad_norm: torch.Tensor, *, samples: int, tokens: int
    ) -> None:
        self.loss += loss
        self.grad_norm = grad_norm
        self.steps, self.samples, self.tokens = (
            self.steps + 1,
            self.samples + samples,
            self.tokens + tokens,
        )

    def flush(self, engine: Engine, *, lr: float, epoch: float) -> dict[str, float]:
        packed = torch.stack(
            [
                self.loss,
                torch.tensor(float(self.samples), device=self.device),
                torch.tensor(float(self.tokens), device=self.device),
            ]
        )
        # Each rank holds its share of every step's mean loss; the sum over ranks is the mean.
        loss, samples, tokens = engine.reduce_sum(packed).tolist()  # host sync (logging step)
        grad_norm = float(self.grad_norm)  # host sync (logging step)
        now = time.perf_counter()
        elapsed = max(now - self.t0, 1e-9)
        out = {
            "loss": loss / self.steps,
            "learning_rate": lr,
            "grad_norm": grad_norm,
            "tokens_per_s": tokens / elapsed,
            "samples_per_s": samples / elapsed,
            "step_time_s": elapsed / self.steps,
            "epoch": epoch,
            "peak_memory_mb": _peak_memory_mb(engine.device),
        }
        self.run_loss, self.run_steps = self.run_loss + loss, self.run_steps + self.steps
        self.run_samples += int(samples)
        self.loss = torch.zeros((), device=self.device)
        self.steps = self.samples = self.tokens = 0
        self.t0 = now
        return out


def _peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB → MiB


# -------------------------------------------------------------------- eval, best, resume


@torch.no_grad()
def _evaluate(engine: Engine, ds: Any, cfg: TrainConfig, tokenizer: Any) -> dict[str, float]:
    task = cfg.model.task
    # A fresh, fixed-seed collator: eval masking (MLM) is the same every time and does not
    # consume the training collator's random stream.
    collate = make_collator(task, tokenizer, seed=cfg.training.seed)
    engine.model.eval()
    totals = torch.zeros(3, device=engine.device)  # loss sum, target count, correct
    for indices, real in eval_batches(
        len(ds),
        batch_size=cfg.training.per_device_eval_batch_size,
        dp_rank=engine.dp_rank,
        dp_size=engine.dp_size,
    ):
        batch = {k: v.to(engine.device) for k, v in collate(_rows(ds, indices)).items()}
        labels = batch.pop("labels")
        terms = torch.stack(
            [t.float() for t in _loss_terms(engine.forward(**batch).logits, labels, task)]
        )
        totals += terms if real else 0 * terms
    engine.model.train()
    loss_sum, count, correct = engine.reduce_sum(totals).tolist()  # host sync (eval only)
    loss = loss_sum / max(count, 1.0)
    out = {"eval_loss": loss}
    if cfg.model.is_classification:
        out["eval_accuracy"] = correct / max(count, 1.0)
    else:
        out["eval_perplexity"] = math.exp(min(loss, 50.0))
    return out


def _update_best(
    state: _State, metrics: dict[str, float], cfg: TrainConfig, scheduler: Any
) -> bool:
    """Track the best eval; step a plateau scheduler; return True when patience ran out."""
    tc = cfg.training
    name = tc.best_metric_name
    if name not in metrics:
        raise KeyError(f"metric_for_best_model {name!r} not among eval metrics {sorted(metrics)}")
    value = metrics[name]
    if tc.lr_scheduler_type == "reduce_lr_on_plateau":
        scheduler.step(value)
    better = state.best_metric is None or (
        value > state.best_metric if tc.higher_is_better else value < state.best_metric
    )
    if better:
        state.best_metric, state.best_step, state.bad_evals = value, state.step, 0
    else:
        state.bad_evals += 1
    patience = tc.early_stopping_patience
    return patience is not None and state.bad_evals >= patience


def _best_dir(cfg: TrainConfig, state: _State) -> Path | None:
    return None if state.best_step is None else cfg.output_dir / f"checkpoint-{state.best_step}"


def _due(strategy: str, every: int, step: int, epoch_done: bool) -> bool:
    return (strategy == "steps" and step % every == 0) or (strategy == "epoch" and epoch_done)


def _pick_resume(reporter: Reporter, output_dir: Path) -> Path | None:
    """Rank 0 chooses (hashing is not free); every rank gets the same answer."""
    choice: list[Path | None] = [None]
    if not dist.is_initialized() or dist.get_rank() == 0:
        given = reporter.latest_checkpoint()
        if given is not None and (problem := verify_checkpoint(given)) is not None:
            log.warning("reporter's checkpoint %s does not verify (%s); scanning", given, problem)
            given = None
        choice[0] = given or latest_verified(output_dir)
    if dist.is_initialized():
        dist.broadcast_object_list(choice, src=0)
    return choice[0]
