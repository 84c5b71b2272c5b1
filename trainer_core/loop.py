"""``train(cfg, reporter)``: the training loop, top to bottom.

setup → resume → for step: train_step → maybe eval → maybe checkpoint → report → final model.
A checkpoint-now request (preemption, pause; ``reporter.stop_requested``) saves a checkpoint at
the step boundary and returns without a final model (``TrainResult.interrupted``). What a
task is (its collator, loss, target count, eval metrics) comes from its ``TaskOps``
(``trainer_core.tasks``); nothing here names a task.

Numerics (the contract the tests hold):
- One optimizer step consumes ``gradient_accumulation_steps`` micro-batches of the stream
  (the stream runs across epoch boundaries, so windows are always full except the very last).
- Loss = sum over the window's targets (the task's ``target_count``: for causal LM the
  labels != -100 after the shift, for sequence classification the samples) of the task's
  loss, divided by the window's target count summed over data-parallel ranks. Each
  micro-step backpropagates its summed loss x dp_size / global_count, because DDP/FSDP
  *average* gradients over ranks. So accum 4 x batch 2 gives the same gradient as accum 1 x
  batch 8, and 2 ranks x batch 4 the same as 1 rank x batch 8, whatever the sequence lengths.
- No host-device sync per step: losses, counts and grad norms stay on the device and are read
  once per logging step (one packed all-reduce, one ``.item()`` chain).
"""

from __future__ import annotations

import contextlib
import logging
import math
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

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
)
from trainer_core.data import (
    BatchOrder,
    eval_batches,
    make_collator,
    row_lengths,
)
from trainer_core.engine import Engine
from trainer_core.export import save_final
from trainer_core.fetch import CheckpointFiles
from trainer_core.health import Diverged, DivergenceGuard
from trainer_core.hub import fetch_models
from trainer_core.model import build_model, build_tokenizer
from trainer_core.optim import make_optimizer, make_scheduler
from trainer_core.parallel import DistInfo, TrainingValues, build_engine, init_distributed
from trainer_core.report_to import finish_trackers, with_trackers
from trainer_core.reporter import Reporter, stop_agreed
from trainer_core.seeding import set_seed
from trainer_core.step_timing import StepTimer
from trainer_core.streaming import ShardedDataset, StreamOrder, load_data
from trainer_core.tasks import TaskOps, task_ops
from trainer_core.tasks.base import Collator

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
    rollbacks: int = 0  # divergence rollbacks so far (trainer_core.health); seed offset too


@dataclass(frozen=True, kw_only=True)
class _Run:
    """What ``_setup`` builds, fixed for the whole run: the model in its engine, the data,
    the task's functions and the schedule."""

    cfg: TrainConfig
    ops: TaskOps
    tokenizer: Any
    engine: Engine
    optimizer: torch.optim.Optimizer  # the torch optimizer the scheduler drives
    scheduler: Any
    train_ds: Any
    eval_ds: Any | None
    collate: Collator
    generator: torch.Generator | None  # the collator's random stream (masked LM), checkpointed
    order: BatchOrder | StreamOrder
    total_steps: int
    num_epochs: int | None  # None: the stream runs until total_steps (max_steps)

    @property
    def tc(self) -> TrainingConfig:
        return self.cfg.training

    def stream(self, state: _State) -> Iterator[tuple[int, int, list[int]]]:
        """(epoch, batch, indices) of the micro-batches from ``state``'s data position."""
        return self.order.iterate(state.epoch, state.batch, self.num_epochs)


def train(cfg: TrainConfig, reporter: Reporter) -> TrainResult:
    """Train; TensorBoard/MLflow (``training.report_to``) are closed on every way out: a final
    model (FINISHED), a checkpoint-now stop (KILLED), an exception (FAILED)."""
    dist_info = init_distributed()
    reporter = with_trackers(reporter, cfg, rank=dist_info.rank)  # + TensorBoard / MLflow
    final_dir, status = None, "FAILED"
    try:
        result = _train(cfg, reporter, dist_info)
        final_dir = result.final_model_dir
        status = "KILLED" if result.interrupted else "FINISHED"
        return result
    finally:
        finish_trackers(reporter, final_dir, status)


def _train(cfg: TrainConfig, reporter: Reporter, dist_info: DistInfo) -> TrainResult:
    """Set up, resume, then one optimizer step per window of micro-batches, each followed by
    the skip/rollback check, eval, the stop-request check, logging and checkpointing."""
    tc = cfg.training
    run = _setup(cfg, dist_info)
    state, resumed_from = _resume(run, reporter, dist_info.world_size)
    stream = run.stream(state)
    run.engine.model.train()
    meter = _Meter(run.engine.device)
    guard = DivergenceGuard(cfg.spec.health.divergence, run.engine.reduce_sum)
    timer = StepTimer(
        cfg.spec.health.straggler, logging_steps=tc.logging_steps, device=run.engine.device
    )
    metrics: dict[str, float] = {}  # the last eval's
    interrupt: str | None = None  # why a checkpoint-now request stopped the run
    stopped_early = False
    start_step, loop_start = state.step, time.perf_counter()
    while state.step < run.total_steps:
        step = state.step + 1
        window = list(islice(stream, tc.gradient_accumulation_steps))
        if not window:
            break  # epochs exhausted before total_steps (fractional last window)
        lr = run.optimizer.param_groups[0]["lr"]  # python float: no sync
        with timer.step():  # per-rank compute vs wait (trainer_core.step_timing)
            skipped = _train_step(run, [ix for _, _, ix in window], meter, guard, timer)
        _advance(run, state, step, window, stepped=not skipped)  # LR schedule, data position
        if skipped and _on_skip(guard, step, reporter):  # too many skips: roll back
            state = _roll_back(run, state, guard, reporter)
            stream = run.stream(state)
            continue
        epoch_done = any(b == len(run.order) - 1 for _, b, _ in window)
        evaluated = run.eval_ds is not None and _due(
            tc.eval_strategy, eval_every(tc), step, epoch_done
        )
        if evaluated:
            with meter.paused():  # step_time_s counts training only
                metrics = _evaluate(run.engine, run.eval_ds, cfg, run.tokenizer)
                stopped_early = _update_best(state, metrics, cfg, run.scheduler)
        last = step == run.total_steps or stopped_early
        interrupt = None if last else stop_agreed(reporter)  # checkpoint now, stop (all ranks)
        out: dict[str, float] = {}
        if meter.steps and (step % tc.logging_steps == 0 or last or interrupt):  # skips: none
            out |= meter.flush(run.engine, lr=lr, epoch=state.epoch + state.batch / len(run.order))
            out |= timer.window_end(out)  # every window: one gloo all_gather of step times
        if evaluated:
            out |= metrics
        new_best = evaluated and state.best_step == step
        save = interrupt or _save_due(tc, step, epoch_done, last=last, new_best=new_best)
        ckpt = _save(run, state) if save else None
        if out or ckpt is not None:
            reporter.report(step, out, checkpoint_dir=ckpt)
        if stopped_early or interrupt:
            break
    summary = _summary(meter, time.perf_counter() - loop_start, state.step - start_step)
    if interrupt:  # the next attempt resumes from the checkpoint just saved
        log.info("stopping at step %d with a checkpoint: %s", state.step, interrupt)
        return _result(run, state, summary, metrics, resumed_from, interrupted=interrupt)
    final_dir = _save_final(run, state, reporter)
    reporter.report(state.step, summary)
    return _result(run, state, summary, metrics, resumed_from, final_dir, stopped_early)


# -------------------------------------------------------------------- setup, resume, end


def _setup(cfg: TrainConfig, dist_info: DistInfo) -> _Run:
    """Model, tokenizer, tokenised data, collator, engine, batch order and LR schedule."""
    tc = cfg.training
    task = cfg.model.task
    fetch_models(cfg.model)  # hub ids: one download per node (a file lock), then the cache
    set_seed(tc.seed)  # python, numpy, torch: same init on every rank
    tokenizer = build_tokenizer(cfg.model)
    model = build_model(cfg.model, tokenizer, seed=tc.seed)
    cache = cfg.tokenized_cache
    shared = cfg.shared_data  # object storage: tokenised once per cluster, in the store
    # A dataset larger than the node cache streams as shards (trainer_core.streaming).
    train_ds = load_data(
        cfg.data.train, cfg.data, task=task, tokenizer=tokenizer, cache_root=cache, shared=shared
    )
    eval_ds = None
    if cfg.data.eval is not None:
        eval_ds = load_data(
            cfg.data.eval, cfg.data, task=task, tokenizer=tokenizer, cache_root=cache, shared=shared
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
    order: BatchOrder | StreamOrder
    if isinstance(train_ds, ShardedDataset):
        if tc.group_by_length:
            log.warning("group_by_length is not applied to a streaming dataset")
        order = StreamOrder.over(
            train_ds,
            batch_size=tc.per_device_train_batch_size,
            seed=tc.seed,
            dp_rank=engine.dp_rank,
            dp_size=engine.dp_size,
        )
    else:
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
    return _Run(
        cfg=cfg,
        ops=task_ops(task),
        tokenizer=tokenizer,
        engine=engine,
        optimizer=base_optimizer[0],
        scheduler=make_scheduler(base_optimizer[0], tc, total_steps),
        train_ds=train_ds,
        eval_ds=eval_ds,
        collate=collate,
        generator=getattr(collate, "generator", None),
        order=order,
        total_steps=total_steps,
        num_epochs=None if tc.max_steps > 0 else math.ceil(tc.num_train_epochs),
    )


def _resume(run: _Run, reporter: Reporter, world_size: int) -> tuple[_State, Path | None]:
    """The state to start from: this job's newest verified checkpoint, else another job's
    (``model.init_from``), else step 0. Also returns the checkpoint resumed from."""
    state = _State(world_size=world_size)
    resumed_from = _pick_resume(reporter, run.cfg.output_dir)
    if resumed_from is not None:
        saved = load_checkpoint(
            resumed_from,
            run.engine,
            scheduler=run.scheduler,
            generator=run.generator,
            files=reporter.checkpoint_files(resumed_from),  # object storage: fetched as read
        )
        state = _State(**{**saved, "world_size": world_size})
        log.info("resumed from %s at step %d", resumed_from, state.step)
    elif run.cfg.model.init_from is not None:  # another job's checkpoint (model.init_from)
        state = _init_from(run.cfg.model.init_from, run, reporter, state)
    return state, resumed_from


def _advance(
    run: _Run, state: _State, step: int, window: list[tuple[int, int, list[int]]], stepped: bool
) -> None:
    """After an optimizer step (``stepped``; a skipped one leaves the LR where it was): the
    LR schedule's step and the data position of the next micro-batch."""
    if stepped and run.tc.lr_scheduler_type != "reduce_lr_on_plateau":
        run.scheduler.step()
    last_epoch, last_batch, _ = window[-1]
    state.step, state.epoch, state.batch = step, last_epoch, last_batch + 1


def _save_due(
    tc: TrainingConfig, step: int, epoch_done: bool, *, last: bool, new_best: bool
) -> bool:
    """``save_strategy`` says this step checkpoints: its interval, the last step, or (with
    ``best``) a new best eval."""
    if tc.save_strategy == "no":
        return False
    best = tc.save_strategy == "best" and new_best
    return _due(tc.save_strategy, tc.save_steps, step, epoch_done) or last or best


def _save(run: _Run, state: _State) -> Path:
    """A checkpoint of this step (then the oldest beyond ``save_total_limit`` go)."""
    out = run.cfg.output_dir
    ckpt = save_checkpoint(
        out,
        state.step,
        run.engine,
        scheduler=run.scheduler,
        trainer_state=vars(state),
        generator=run.generator,
    )
    prune_checkpoints(out, run.tc.save_total_limit, _best_dir(run.cfg, state))
    return ckpt


def _save_final(run: _Run, state: _State, reporter: Reporter) -> Path:
    """The final model (the best checkpoint's with ``load_best_model_at_end``)."""
    best = _best_dir(run.cfg, state)
    if run.tc.load_best_model_at_end and best is not None:
        directory, files = _readable(reporter, best)
        if files is not None or best.exists():
            run.engine.load(directory, files=files)
    return save_final(run.engine, run.tokenizer, run.cfg.model, run.cfg.output_dir / "final")


def _summary(meter: _Meter, runtime: float, steps_run: int) -> dict[str, float]:
    """The run's closing report (since resume; ``runtime``: the step loop only)."""
    return {
        "train_loss": meter.run_loss / max(meter.run_steps, 1),
        "train_runtime_s": runtime,
        "train_samples_per_second": meter.run_samples / runtime if runtime > 0 else 0.0,
        "steps_run": float(steps_run),
    }


def _result(
    run: _Run,
    state: _State,
    summary: dict[str, float],
    metrics: dict[str, float],
    resumed_from: Path | None,
    final_dir: Path | None = None,
    stopped_early: bool = False,
    *,
    interrupted: str | None = None,
) -> TrainResult:
    return TrainResult(
        global_step=state.step,
        train_loss=summary["train_loss"],
        train_runtime_s=summary["train_runtime_s"],
        train_samples_per_second=summary["train_samples_per_second"],
        metrics=metrics,
        final_model_dir=final_dir,
        best_checkpoint=_best_dir(run.cfg, state),
        resumed_from=resumed_from,
        stopped_early=stopped_early,
        interrupted=interrupted,
    )


# -------------------------------------------------------------------- one optimizer step


def _train_step(
    run: _Run, window: list[list[int]], meter: _Meter, guard: DivergenceGuard, timer: StepTimer
) -> bool:
    """One optimizer step over ``window``; True when the divergence guard skipped it."""
    engine, ops = run.engine, run.ops
    # Collate the whole window first: its global target count normalises every micro-step.
    batches = [run.collate(_rows(run.train_ds, indices)) for indices in window]
    local_count = sum(ops.target_count(b["labels"]) for b in batches)  # CPU ints: no sync
    count = torch.tensor(float(local_count), device=engine.device)
    global_count = engine.reduce_sum(count).clamp_(min=1.0)  # collective, stays on device
    scale = engine.dp_size / global_count  # DDP/FSDP average grads over dp ranks; undo that
    loss_sum = torch.zeros((), device=engine.device)
    for i, batch in enumerate(batches):
        batch = {k: v.to(engine.device, non_blocking=True) for k, v in batch.items()}
        labels = batch.pop("labels")
        final = i == len(batches) - 1
        with contextlib.nullcontext() if final else engine.no_sync():
            with timer.compute():
                summed, _ = ops.loss(engine.forward(**batch), labels, run.tc)
            engine.backward(summed * scale)
        loss_sum += summed.detach()
    gate = None
    if guard.enabled:  # the global mean loss (one small all-reduce, stays on the device)
        gate = guard.gate(engine.reduce_sum(loss_sum) / global_count)
    grad_norm = engine.clip_and_step(clip_norm(run.tc), skip=gate)
    if gate is not None and guard.last is not None and guard.last.skip:
        return True  # the meter keeps good steps only: a NaN would poison the logged mean
    samples = sum(len(ix) for ix in window)
    tokens = sum(_tokens(b) for b in batches)
    meter.add(loss_sum / global_count, grad_norm, samples=samples, tokens=tokens)
    return False


# -------------------------------------------------------------------- divergence


def _on_skip(guard: DivergenceGuard, step: int, reporter: Reporter) -> bool:
    """Record a skipped step (a metric the service turns into an event); True = roll back."""
    verdict = guard.last
    assert verdict is not None
    guard.record_skip(step)
    log.warning(
        "step %d skipped (%s): loss %s, grad norm %s",
        step,
        verdict.reason,
        verdict.loss,
        verdict.grad_norm,
    )
    reporter.report(
        step,
        {
            "health_skipped_steps": float(guard.total_skips),
            "health_skipped_loss": verdict.loss,
            "health_skipped_grad_norm": verdict.grad_norm,
        },
    )
    return guard.rollback_due(step)


def _roll_back(run: _Run, state: _State, guard: DivergenceGuard, reporter: Reporter) -> _State:
    """Back to the last verified checkpoint, past the data that led here, with a new seed.
    Raises ``Diverged`` after ``max_rollbacks`` rollbacks or with no checkpoint to go to."""
    cfg, generator = run.cfg, run.generator
    spec = cfg.spec.health.divergence
    if state.rollbacks >= spec.max_rollbacks:
        raise Diverged(state.step, guard.last_finite_loss, state.rollbacks)
    target = _agreed(lambda: latest_verified(cfg.output_dir, reporter.checkpoint_files))
    if target is None:
        raise Diverged(state.step, guard.last_finite_loss, state.rollbacks)
    directory, files = _readable(reporter, target)
    saved = load_checkpoint(
        directory, run.engine, scheduler=run.scheduler, generator=generator, files=files
    )
    rollbacks = state.rollbacks + 1
    # Keep the data position: the batches since the checkpoint are skipped, not replayed.
    back = _State(
        **{**saved, "world_size": state.world_size, "epoch": state.epoch, "batch": state.batch}
    )
    back.rollbacks = rollbacks
    seed = cfg.training.seed + rollbacks  # dropout, masking: not the same draws again
    set_seed(seed)
    if generator is not None:
        rank = dist.get_rank() if dist.is_initialized() else 0
        generator.manual_seed(seed + rank)
    guard.after_rollback()
    log.warning(
        "rollback %d/%d at step %d: back to %s (step %d), seed %d",
        rollbacks,
        spec.max_rollbacks,
        state.step,
        target,
        back.step,
        seed,
    )
    reporter.report(
        state.step,
        {
            "health_rollbacks": float(rollbacks),
            "health_rollback_to_step": float(back.step),
            "health_seed": float(seed),
        },
    )
    return back


def _rows(ds: Any, indices: list[int]) -> list[dict[str, Any]]:
    cols = ds[indices]  # one Arrow slice for the batch instead of one lookup per row
    return [dict(zip(cols, values, strict=True)) for values in zip(*cols.values(), strict=True)]


def _tokens(batch: dict[str, torch.Tensor]) -> int:
    """Input tokens of a batch (CPU tensors: no sync); packed chat rows have no mask."""
    mask = batch.get("attention_mask")
    return int(mask.sum()) if mask is not None else batch["input_ids"].numel()


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

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Time spent inside does not count as step time (eval between steps)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.t0 += time.perf_counter() - start

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
    """The task's eval metrics over ``ds``: its ``eval_stats`` summed over batches and ranks,
    then its ``metrics``."""
    task = cfg.model.task
    ops = task_ops(task)
    # A fresh, fixed-seed collator: eval masking (MLM) is the same every time and does not
    # consume the training collator's random stream.
    model_config = getattr(engine.unwrapped, "config", None)
    collate = make_collator(task, tokenizer, seed=cfg.training.seed, model_config=model_config)
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
        stats = stats if real else 0 * stats  # a padding batch: every rank runs each forward
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


def _init_from(init: Any, run: _Run, reporter: Reporter, state: _State) -> _State:
    """Start from another job's checkpoint: everything (``resume``) or the weights only."""
    if not isinstance(init, dict):  # the JobSpec section itself (a pydantic model)
        init = init.model_dump()
    path = Path(init["path"])
    files = reporter.checkpoint_files(path)
    if (problem := _problem(path, files)) is not None:
        raise RuntimeError(f"model.init_from checkpoint {path} does not verify: {problem}")
    engine = run.engine
    if init.get("resume"):
        saved = load_checkpoint(
            path, engine, scheduler=run.scheduler, generator=run.generator, files=files
        )
        log.info("continuing %s from %s at step %d", init["job"], path, saved["step"])
        return _State(**{**saved, "world_size": state.world_size})
    lrs = [group["lr"] for group in engine.optimizer.param_groups]
    engine.load(path, files=files)  # model and optimizer; the optimizer's part is dropped below
    engine.optimizer.state.clear()  # weights only: fresh moments and step counts
    for group, lr in zip(engine.optimizer.param_groups, lrs, strict=True):
        group["lr"] = lr  # this job's schedule, not the saved job's last learning rate
    log.info("initialised weights from %s (%s)", path, init["job"])
    return state


def _pick_resume(reporter: Reporter, output_dir: Path) -> Path | None:
    """Rank 0 chooses (hashing is not free); every rank gets the same answer."""

    def choose() -> Path | None:
        given = reporter.latest_checkpoint()
        problem = None if given is None else _problem(given, reporter.checkpoint_files(given))
        if problem is not None:
            log.warning("reporter's checkpoint %s does not verify (%s); scanning", given, problem)
            given = None
        return given or latest_verified(output_dir)

    return _agreed(choose)


def _readable(reporter: Reporter, path: Path) -> tuple[Path, CheckpointFiles | None]:
    """Where to load this attempt's checkpoint ``path`` from, and how: on local disk, or (a
    job on several nodes without a shared disk, whose staging holds only this node's part)
    through the reporter's view of the copy in object storage, which has its own directory."""
    files = reporter.checkpoint_files(path)
    return (path if files is None else files.path), files


def _problem(path: Path, files: CheckpointFiles | None) -> str | None:
    """Why ``path`` is no checkpoint to load: hashed on local disk, or asked of ``files``."""
    return verify_checkpoint(path) if files is None else files.problem()


def _agreed(choose: Callable[[], Path | None]) -> Path | None:
    """Rank 0's ``choose()``, broadcast to every rank (a collective when distributed)."""
    choice: list[Path | None] = [None]
    if not dist.is_initialized() or dist.get_rank() == 0:
        choice[0] = choose()
    if dist.is_initialized():
        dist.broadcast_object_list(choice, src=0)
    return choice[0]
