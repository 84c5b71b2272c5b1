"""``train(cfg, reporter)``: the training loop, top to bottom.

build → resume → for step: train_step → maybe eval → maybe checkpoint → report → final model.
A checkpoint-now request (preemption, pause; ``reporter.stop_requested``) saves a checkpoint at
the step boundary and returns without a final model (``TrainResult.interrupted``).

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
from trainer_core.config import (
    TrainConfig,
    TrainingConfig,
    best_metric_key,
    clip_norm,
    eval_every,
    higher_is_better,
    is_classification,
)
from trainer_core.data import (
    BatchOrder,
    eval_batches,
    load_tokenized,
    make_collator,
    row_lengths,
)
from trainer_core.engine import Engine
from trainer_core.export import save_final
from trainer_core.hub import fetch_models
from trainer_core.model import build_model, build_tokenizer
from trainer_core.optim import make_optimizer, make_scheduler
from trainer_core.parallel import TrainingValues, build_engine, init_distributed
from trainer_core.report_to import finish_trackers, with_trackers
from trainer_core.reporter import Reporter, stop_agreed
from trainer_core.tasks import TASK_OPS, TaskOps

__all__ = ["TrainResult", "train"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    global_step: int
    train_loss: float  # mean of the per-step losses of this run (since resume)
    train_runtime_s: float  # the step loop only, not model/data building
    train_samples_per_second: float
    metrics: dict[str, float]  # the last eval's metrics ({} without eval)
    final_model_dir: Path | None  # None when interrupted
    best_checkpoint: Path | None
    resumed_from: Path | None
    stopped_early: bool
    interrupted: str | None = None  # why the run checkpointed and stopped early (preemption)


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
    reporter = with_trackers(reporter, cfg, rank=dist_info.rank)  # + TensorBoard / MLflow
    fetch_models(cfg.model)  # hub ids: one download per node (a file lock), then the cache
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
    collate = make_collator(
        task, tokenizer, seed=tc.seed + dist_info.rank, model_config=getattr(model, "config", None)
    )
    base_optimizer: list[torch.optim.Optimizer] = []  # the torch optimizer the scheduler drives

    def _make_optimizer(module: torch.nn.Module) -> torch.optim.Optimizer:
        base_optimizer.append(make_optimizer(module, tc))
        return base_optimizer[-1]

    engine = build_engine(
        model,
        cfg.parallel,
        make_optimizer=_make_optimizer,
        device=dist_info.device,
        # What a DeepSpeed config's "auto" values stand for; the total is known up front
        # only with max_steps (epochs need the data-parallel size, known after this call).
        training=TrainingValues.from_training(
            tc, total_steps=tc.max_steps if tc.max_steps > 0 else None
        ),
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
    elif cfg.model.init_from is not None:  # another job's checkpoint (model.init_from)
        state = _init_from(cfg.model.init_from, engine, scheduler, generator, state)

    # ---- loop ------------------------------------------------------------------------
    stream = order.iterate(state.epoch, state.batch, num_epochs)
    engine.model.train()
    meter = _Meter(engine.device)
    metrics: dict[str, float] = {}
    stopped_early = False
    interrupt: str | None = None
    loop_start = time.perf_counter()
    start_step = state.step
    for step in range(state.step + 1, total_steps + 1):
        window = list(islice(stream, accum))
        if not window:
            break  # epochs exhausted before total_steps (fractional last window)
        lr = base_optimizer[0].param_groups[0]["lr"]  # python float: no sync
        _train_step(engine, [ix for _, _, ix in window], train_ds, collate, task, tc, meter)
        if tc.lr_scheduler_type != "reduce_lr_on_plateau":
            scheduler.step()
        last_epoch, last_batch, _ = window[-1]
        state.step, state.epoch, state.batch = step, last_epoch, last_batch + 1
        epoch_done = any(b == len(order) - 1 for _, b, _ in window)
        evaluated = eval_ds is not None and _due(tc.eval_strategy, eval_every(tc), step, epoch_done)
        if evaluated:
            eval_start = time.perf_counter()
            metrics = _evaluate(engine, eval_ds, cfg, tokenizer)
            stopped_early = _update_best(state, metrics, cfg, scheduler)
            meter.t0 += time.perf_counter() - eval_start  # step_time_s counts training only
        last = step == total_steps or stopped_early
        new_best = tc.save_strategy == "best" and evaluated and state.best_step == step
        interrupt = None if last else stop_agreed(reporter)  # checkpoint now, stop (all ranks)
        out: dict[str, float] = {}
        if step % tc.logging_steps == 0 or last or interrupt:
            out |= meter.flush(engine, lr=lr, epoch=last_epoch + (last_batch + 1) / len(order))
        if evaluated:
            out |= metrics
        ckpt = None
        if interrupt or (
            tc.save_strategy != "no"
            and (_due(tc.save_strategy, tc.save_steps, step, epoch_done) or last or new_best)
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
        if stopped_early or interrupt:
            break
    runtime = time.perf_counter() - loop_start
    if interrupt:  # the next attempt resumes from the checkpoint just saved
        log.info("stopping at step %d with a checkpoint: %s", state.step, interrupt)
        return TrainResult(
            global_step=state.step,
            train_loss=meter.run_loss / max(meter.run_steps, 1),
            train_runtime_s=runtime,
            train_samples_per_second=meter.run_samples / runtime if runtime > 0 else 0.0,
            metrics=metrics,
            final_model_dir=None,
            best_checkpoint=_best_dir(cfg, state),
            resumed_from=resumed_from,
            stopped_early=False,
            interrupted=interrupt,
        )

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
    finish_trackers(reporter, final_dir)
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
    tc: TrainingConfig,
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
            summed = _loss(engine.forward(**batch), labels, task, tc)
            engine.backward(summed * scale)
        loss_sum += summed.detach()
    grad_norm = engine.clip_and_step(clip_norm(tc))
    samples = sum(len(ix) for ix in window)
    tokens = sum(_tokens(b) for b in batches)
    meter.add(loss_sum / global_count, grad_norm, samples=samples, tokens=tokens)


def _rows(ds: Any, indices: list[int]) -> list[dict[str, Any]]:
    cols = ds[indices]  # one Arrow slice for the batch instead of one lookup per row
    return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]


def _tokens(batch: dict[str, torch.Tensor]) -> int:
    """Input tokens of a batch (CPU tensors: no sync); packed chat rows have no mask."""
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else batch["input_ids"].numel()


def _target_count(labels: torch.Tensor, task: str) -> int:
    if (ops := TASK_OPS.get(task)) is not None:
        return ops.target_count(labels)
    if task == "causal-lm":
        labels = labels[:, 1:]
    return int((labels != -100).sum())


def _loss(output: Any, labels: torch.Tensor, task: str, tc: TrainingConfig) -> torch.Tensor:
    """The summed training loss of one micro-batch (the caller normalises it)."""
    if (ops := TASK_OPS.get(task)) is not None:
        return ops.loss(output, labels, tc)[0]
    return _loss_terms(output.logits, labels, task, tc)[0]


def _loss_terms(
    logits: torch.Tensor, labels: torch.Tensor, task: str, tc: TrainingConfig | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(summed cross-entropy, target count, correct predictions), all 0-dim device tensors.
    With ``tc`` (training): its class weights and label smoothing apply; eval passes none."""
    if task == "causal-lm":  # position t predicts token t+1
        logits, labels = logits[:, :-1], labels[:, 1:]
    flat = logits.reshape(-1, logits.size(-1)).float()
    target = labels.reshape(-1)
    weights = tc.class_weights if tc is not None else None
    summed = F.cross_entropy(
        flat,
        target,
        weight=None if weights is None else torch.tensor(weights, device=flat.device),
        ignore_index=-100,
        reduction="sum",
        label_smoothing=tc.label_smoothing_factor if tc is not None else 0.0,
    )
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
    model_config = getattr(engine.unwrapped, "config", None)
    collate = make_collator(task, tokenizer, seed=cfg.training.seed, model_config=model_config)
    if (ops := TASK_OPS.get(task)) is not None:
        return _evaluate_task(engine, ds, cfg, ops, collate)
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
    if is_classification(cfg.model.task):
        out["eval_accuracy"] = correct / max(count, 1.0)
    else:
        out["eval_perplexity"] = math.exp(min(loss, 50.0))
    return out


def _evaluate_task(
    engine: Engine, ds: Any, cfg: TrainConfig, ops: TaskOps, collate: Any
) -> dict[str, float]:
    """Eval of a ``trainer_core.tasks`` task: sum its stats over batches and ranks."""
    engine.model.eval()
    totals: torch.Tensor | None = None
    for indices, real in eval_batches(
        len(ds),
        batch_size=cfg.training.per_device_eval_batch_size,
        dp_rank=engine.dp_rank,
        dp_size=engine.dp_size,
    ):
        batch = {k: v.to(engine.device) for k, v in collate(_rows(ds, indices)).items()}
        labels = batch.pop("labels")
        stats = ops.eval_stats(engine.forward(**batch), labels)
        stats = stats if real else 0 * stats
        totals = stats if totals is None else totals + stats
    engine.model.train()
    assert totals is not None  # eval_batches yields at least one batch per rank
    return ops.metrics(engine.reduce_sum(totals).tolist())  # host sync (eval only)


def _update_best(
    state: _State, metrics: dict[str, float], cfg: TrainConfig, scheduler: Any
) -> bool:
    """Track the best eval; step a plateau scheduler; return True when patience ran out."""
    tc = cfg.training
    name = best_metric_key(tc)
    if name not in metrics:
        raise KeyError(f"metric_for_best_model {name!r} not among eval metrics {sorted(metrics)}")
    value = metrics[name]
    if tc.lr_scheduler_type == "reduce_lr_on_plateau":
        scheduler.step(value)
    better = state.best_metric is None or (
        value > state.best_metric if higher_is_better(tc) else value < state.best_metric
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


def _init_from(init: Any, engine: Engine, scheduler: Any, generator: Any, state: _State) -> _State:
    """Start from another job's checkpoint: everything (``resume``) or the weights only."""
    if not isinstance(init, dict):  # the JobSpec section itself (a pydantic model)
        init = init.model_dump()
    path = Path(init["path"])
    if (problem := verify_checkpoint(path)) is not None:
        raise RuntimeError(f"model.init_from checkpoint {path} does not verify: {problem}")
    if init.get("resume"):
        saved = load_checkpoint(path, engine, scheduler=scheduler, generator=generator)
        log.info("continuing %s from %s at step %d", init["job"], path, saved["step"])
        return _State(**{**saved, "world_size": state.world_size})
    lrs = [group["lr"] for group in engine.optimizer.param_groups]
    engine.load(path)  # model and optimizer; the optimizer's part is dropped below
    engine.optimizer.state.clear()  # weights only: fresh moments and step counts
    for group, lr in zip(engine.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr  # this job's schedule, not the saved job's last learning rate
    log.info("initialised weights from %s (%s)", path, init["job"])
    return state


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
