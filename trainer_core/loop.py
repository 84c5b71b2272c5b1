"""``train(cfg, reporter)``: the training loop, top to bottom.

setup → resume → for step: train_step → maybe eval → maybe checkpoint → report → final model.
A checkpoint-now request (preemption, pause; ``reporter.stop_requested``) saves a checkpoint at
the step boundary and returns without a final model (``TrainResult.interrupted``). What a
task is (its collator, loss, target count, eval metrics) comes from its ``TaskOps``
(``trainer_core.tasks``); nothing here names a task.

The loop's parts beside it: ``train_step`` (one optimizer step), ``meter`` (the logged
accumulators), ``evaluation``, ``rollback`` (skipped steps and divergence rollbacks),
``resume_from`` (which checkpoint a run starts from) and ``run_state`` (``State``, ``Run``).

Numerics (the contract the tests hold):
- One optimizer step consumes ``gradient_accumulation_steps`` micro-batches of the stream
  (the stream runs across epoch boundaries, so windows are always full except the very last).
- Loss = sum over the window's targets (the task's ``target_count``: for causal LM the
  labels != -100 after the shift, for sequence classification the samples) of the task's
  loss, divided by the window's target count summed over data-parallel ranks. Each
  micro-step backpropagates its summed loss x dp_size / global_count, because DDP/FSDP
  *average* gradients over ranks. So accum 4 x batch 2 gives the same gradient as accum 1 x
  batch 8, and 2 ranks x batch 4 the same as 1 rank x batch 8, whatever the sequence lengths.
  Context parallel: the cp ranks of a dp rank read the same rows and each backpropagates
  its sequence shards' summed loss x dp x cp / global_count (``parallel.context``).
- No host-device sync per step: losses, counts and grad norms stay on the device and are read
  once per logging step (one packed all-reduce, one ``.item()`` chain).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import torch

from trainer_core.checkpoint import (
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from trainer_core.config import (
    TrainConfig,
    TrainingConfig,
    best_metric_key,
    eval_every,
    higher_is_better,
)
from trainer_core.data import (
    BatchOrder,
    make_collator,
    row_lengths,
)
from trainer_core.evaluation import evaluate
from trainer_core.export import save_final
from trainer_core.health import DivergenceGuard
from trainer_core.hub import fetch_models
from trainer_core.meter import Meter
from trainer_core.model import build_model, build_tokenizer
from trainer_core.optim import make_optimizer, make_scheduler
from trainer_core.parallel import DistInfo, TrainingValues, build_engine, init_distributed
from trainer_core.report_to import finish_trackers, with_trackers
from trainer_core.reporter import Reporter, stop_agreed
from trainer_core.resume_from import apply_init_from, pick_resume, readable_checkpoint
from trainer_core.rollback import on_skip, roll_back
from trainer_core.row_order import RowOrder, elastic_order
from trainer_core.run_state import Run, State
from trainer_core.seeding import set_seed
from trainer_core.step_timing import StepTimer
from trainer_core.streaming import ShardedDataset, StreamOrder, load_data
from trainer_core.tasks import task_ops
from trainer_core.train_step import train_step

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
    _rebase(state, _position_rows(run))
    stream = run.stream(state)
    run.engine.model.train()
    meter = Meter(run.engine.device)
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
        before = _position(run, state)
        with timer.step():  # per-rank compute vs wait (trainer_core.step_timing)
            skipped = train_step(run, [ix for _, _, ix in window], meter, guard, timer)
        _advance(run, state, step, window, stepped=not skipped)  # LR schedule, data position
        if skipped and on_skip(guard, step, reporter):  # too many skips: roll back
            state = roll_back(run, state, guard, reporter)
            stream = run.stream(state)
            continue
        # the window read an epoch's last batch (row): it passed a multiple of len(order)
        epoch_done = _position(run, state) // len(run.order) > before // len(run.order)
        evaluated = run.eval_ds is not None and _due(
            tc.eval_strategy, eval_every(tc), step, epoch_done
        )
        if evaluated:
            with meter.paused():  # step_time_s counts training only
                metrics = evaluate(run.engine, run.eval_ds, cfg, run.tokenizer)
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


def _setup(cfg: TrainConfig, dist_info: DistInfo) -> Run:
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
    order: BatchOrder | StreamOrder | RowOrder
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
    per_step = accum  # data positions one step reads
    if cfg.spec.resources.elastic_from is not None:  # the same rows per step at every width
        order = elastic_order(order, cfg.spec.resources.elastic_from, accumulation=accum)
        per_step = accum * engine.dp_size * tc.per_device_train_batch_size
    total_steps = (
        tc.max_steps if tc.max_steps > 0 else math.ceil(tc.num_train_epochs * len(order) / per_step)
    )
    return Run(
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


def _resume(run: Run, reporter: Reporter, world_size: int) -> tuple[State, Path | None]:
    """The state to start from: this job's newest verified checkpoint, else another job's
    (``model.init_from``), else step 0. Also returns the checkpoint resumed from."""
    state = State(world_size=world_size)
    resumed_from = pick_resume(reporter, run.cfg.output_dir)
    if resumed_from is not None:
        saved = load_checkpoint(
            resumed_from,
            run.engine,
            scheduler=run.scheduler,
            generator=run.generator,
            files=reporter.checkpoint_files(resumed_from),  # object storage: fetched as read
        )
        state = State(**{**saved, "world_size": world_size})
        log.info("resumed from %s at step %d", resumed_from, state.step)
    elif run.cfg.model.init_from is not None:  # another job's checkpoint (model.init_from)
        state = apply_init_from(run.cfg.model.init_from, run, reporter, state)
    return state, resumed_from


def _position_rows(run: Run) -> int:
    """Rows one data position covers over the data-parallel ranks: a batch of each rank, or
    one row (an elastic run's ``RowOrder``)."""
    if isinstance(run.order, RowOrder):
        return run.order.unit
    return run.engine.dp_size * run.tc.per_device_train_batch_size


def _position(run: Run, state: State) -> int:
    """The data position counted from the start of epoch 0."""
    return state.epoch * len(run.order) + state.batch


def _rebase(state: State, rows: int) -> None:
    """Put the data position in this run's batches (``rows`` rows per batch index over the
    data-parallel ranks). An elastic job resumes on another width with the same per-device
    batch and the accumulation re-derived (``shunter.jobspec.elastic``): each step takes the
    same rows at any width, so the rows consumed so far are the position; a checkpoint saved
    on 4 ranks at batch 6 is batch 12 on 2. An elastic run's positions are rows
    (``RowOrder``), so its resume is exact at any width; the error is left for a checkpoint
    of an elastic run resumed as a rigid one mid-batch."""
    old = state.rows_per_batch
    if old and old != rows and state.batch:
        consumed = state.batch * old
        if consumed % rows:
            raise RuntimeError(
                f"cannot resume at an exact data position: {consumed} rows consumed are not "
                f"a whole number of this run's {rows}-row batches"
            )
        state.batch = consumed // rows
    state.rows_per_batch = rows


def _advance(
    run: Run, state: State, step: int, window: list[tuple[int, int, list[int]]], stepped: bool
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


def _save(run: Run, state: State) -> Path:
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


def _save_final(run: Run, state: State, reporter: Reporter) -> Path:
    """The final model (the best checkpoint's with ``load_best_model_at_end``)."""
    best = _best_dir(run.cfg, state)
    if run.tc.load_best_model_at_end and best is not None:
        directory, files = readable_checkpoint(reporter, best)
        if files is not None or best.exists():
            run.engine.load(directory, files=files)
    return save_final(run.engine, run.tokenizer, run.cfg.model, run.cfg.output_dir / "final")


def _summary(meter: Meter, runtime: float, steps_run: int) -> dict[str, float]:
    """The run's closing report (since resume; ``runtime``: the step loop only)."""
    return {
        "train_loss": meter.run_loss / max(meter.run_steps, 1),
        "train_runtime_s": runtime,
        "train_samples_per_second": meter.run_samples / runtime if runtime > 0 else 0.0,
        "steps_run": float(steps_run),
    }


def _result(
    run: Run,
    state: State,
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


# -------------------------------------------------------------------- best eval, due


def _update_best(state: State, metrics: dict[str, float], cfg: TrainConfig, scheduler: Any) -> bool:
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


def _best_dir(cfg: TrainConfig, state: State) -> Path | None:
    return None if state.best_step is None else cfg.output_dir / f"checkpoint-{state.best_step}"


def _due(strategy: str, every: int, step: int, epoch_done: bool) -> bool:
    return (strategy == "steps" and step % every == 0) or (strategy == "epoch" and epoch_done)
