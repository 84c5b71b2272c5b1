"""Shared harness for the strategy tests and ``bench/strategies.py``.

A tiny Llama built from a config, a deterministic global batch per step, and a minimal loop
over the Engine verbs (accumulation with ``no_sync``, ``reduce_sum``, ``clip_and_step``,
``save``/``load``). Every strategy sees the same global batch per step; each data-parallel
rank takes its contiguous slice, so the averaged gradient equals the single-process one.
Run in spawned processes (gloo, CPU) by ``spawn``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import resource
import socket
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from trainer_core.parallel import ParallelConfig, build_engine, init_distributed

__all__ = ["TINY_LLAMA", "Job", "TrainJob", "run_job", "run_train_job", "spawn"]

TINY_LLAMA: dict[str, Any] = {
    "vocab_size": 128,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
GLOBAL_BATCH = 8
SEQ_LEN = 16
ACCUM = 2
LR = 1e-2
MAX_GRAD_NORM = 1.0
_HANG_S = 600


@dataclass(frozen=True, kw_only=True)
class Job:
    """One training run: steps ``first..last`` (1-based, inclusive) under ``cfg``."""

    name: str
    cfg: ParallelConfig
    first: int = 1
    last: int = 4
    save_after: int | None = None
    save_dir: str | None = None
    load_from: str | None = None
    model_overrides: dict[str, Any] = field(default_factory=dict)
    global_batch: int = GLOBAL_BATCH
    seq_len: int = SEQ_LEN
    full_state_path: str | None = None
    timed_from: int | None = None  # first step counted in seconds/tokens (None: all)
    # Object storage: after the save, write its manifest and upload it to this URI ...
    upload_to: str | None = None
    # ... and load_from is such a URI, read through a node cache at load_via.format(rank=r).
    load_via: str | None = None
    block_size: int | None = None  # the uploaded manifest's hashed blocks (default 4 MiB)
    # trainer_core.optim's optimizer for these TrainingSpec keys (lr LR) instead of AdamW.
    optim: dict[str, Any] | None = None
    state_bytes_path: str | None = None  # rank 0 writes its optimizer-state bytes here


def batch_for(step: int, job: Job) -> torch.Tensor:
    """Step ``step``'s global batch: arithmetic token sequences (learnable, so the loss falls
    and a wrong update shows), the same on every rank and in every strategy."""
    vocab = job.model_overrides.get("vocab_size", TINY_LLAMA["vocab_size"])
    g = torch.Generator().manual_seed(1000 + step)
    start = torch.randint(0, vocab, (job.global_batch, 1), generator=g)
    stride = torch.randint(1, 4, (job.global_batch, 1), generator=g)
    return (start + stride * torch.arange(job.seq_len)) % vocab


def run_job(job: Job, device: torch.device) -> dict[str, Any]:
    """Train ``job`` on this rank; returns per-step global loss and grad norm (all ranks)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)  # identical init on every rank
    model = LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, **job.model_overrides}))

    def make_optimizer(m: torch.nn.Module) -> torch.optim.Optimizer:
        if job.optim is not None:
            from shunter.jobspec import TrainingSpec
            from trainer_core.optim import make_optimizer as from_spec

            return from_spec(m, TrainingSpec(**{"learning_rate": LR, **job.optim}))
        return torch.optim.AdamW(m.parameters(), lr=LR)

    engine = build_engine(model, job.cfg, make_optimizer=make_optimizer, device=device)
    files, load_s = None, 0.0
    if job.load_from:
        start = time.perf_counter()
        path, files = _checkpoint_to_load(job)
        engine.load(path, files=files)
        load_s = time.perf_counter() - start
    losses: list[float] = []
    norms: list[float] = []
    tokens = 0
    timed_from = job.timed_from or job.first
    start = time.perf_counter()
    for step in range(job.first, job.last + 1):
        if step == timed_from:
            start = time.perf_counter()
        rows = job.global_batch // engine.dp_size
        mine = batch_for(step, job)[engine.dp_rank * rows : (engine.dp_rank + 1) * rows]
        total = torch.zeros((), device=device)
        pipeline_step = getattr(engine, "pipeline_step", None)
        if pipeline_step is not None:  # a schedule runs the whole window (cfg's microbatches)
            total += pipeline_step(mine, mine)
        for i, micro in enumerate(() if pipeline_step else mine.to(device).chunk(ACCUM)):
            sync = contextlib.nullcontext() if i == ACCUM - 1 else engine.no_sync()
            with sync:
                # Equal-length rows: the mean over micro-batches and ranks is the global mean.
                loss = engine.forward(input_ids=micro, labels=micro).loss / ACCUM
                engine.backward(loss)
            total += loss.detach().float()
        norm = engine.clip_and_step(job.cfg.max_grad_norm)
        losses.append(engine.reduce_sum(total).item() / engine.dp_size)
        norms.append(float(norm))
        tokens += mine.numel() if step >= timed_from else 0
        if job.save_after == step:
            assert job.save_dir is not None
            engine.save(Path(job.save_dir))
            if job.upload_to:
                _upload(Path(job.save_dir), job.upload_to, job.block_size)
    elapsed = time.perf_counter() - start
    if job.state_bytes_path and engine.dp_rank == 0:
        from trainer_core.optim import optimizer_state_bytes

        Path(job.state_bytes_path).write_text(str(optimizer_state_bytes(engine.optimizer)))
    if job.full_state_path:
        full = engine.full_state_dict()
        if full:
            torch.save(full, job.full_state_path)
    out = {
        "losses": losses,
        "norms": norms,
        "seconds": elapsed,
        "tokens_per_rank": tokens,
        "load_s": _per_rank(load_s),  # each rank's checkpoint load (fetches included)
    }
    if files is not None:  # bytes each rank's node fetched, per file
        out["fetched"] = _per_rank(files.fetched())  # type: ignore[attr-defined]
    return out


def _checkpoint_to_load(job: Job) -> tuple[Path, Any]:
    """``job.load_from`` on local disk, or (``load_via``) its view in this rank's node cache."""
    if job.load_via is None:
        return Path(job.load_from or ""), None
    from worker.staging import cached, localize

    rank = dist.get_rank() if dist.is_initialized() else 0
    path = localize(job.load_from or "", Path(job.load_via.format(rank=rank)), local_rank=0)
    return path, cached(path)


def _upload(directory: Path, uri: str, block_size: int | None) -> None:
    """Publish a checkpoint every rank saved into ``directory`` as a job's lands in the
    bucket: its manifest, then every file."""
    import storage
    from trainer_core.manifest import file_table, write_manifest

    if dist.is_initialized():
        dist.barrier()  # every rank's files are written
    if not dist.is_initialized() or dist.get_rank() == 0:
        write_manifest(directory, file_table(directory, block_size=block_size))
        storage.upload_dir(directory, uri)
    if dist.is_initialized():
        dist.barrier()


def _per_rank(value: Any) -> list[Any]:
    world = dist.get_world_size() if dist.is_initialized() else 1
    out: list[Any] = [value] * world
    if world > 1:
        dist.all_gather_object(out, value)
    return out


@dataclass(frozen=True, kw_only=True)
class TrainJob:
    """One run of the real ``trainer_core.train`` on a JobSpec dict (metrics.jsonl in
    ``spec.training.output_dir``)."""

    name: str
    spec: dict[str, Any]


def run_train_job(job: TrainJob, device: torch.device) -> dict[str, Any]:
    from trainer_core import JsonlReporter, TrainConfig, train

    out = Path(job.spec["training"]["output_dir"])
    with open(os.devnull, "w") as quiet:
        result = train(TrainConfig.from_spec(job.spec), JsonlReporter(out, stream=quiet))
    return {"global_step": result.global_step, "resumed_from": str(result.resumed_from)}


def _worker(rank: int, world: int, ports: list[int], phases: list[list[Any]], out: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        HF_HUB_OFFLINE="1",
    )
    # A hung collective must fail the test, not hold the suite until pytest's timeout.
    faulthandler.dump_traceback_later(_HANG_S, exit=True)
    torch.set_num_threads(1)  # 2 cores shared by several ranks
    warnings.filterwarnings("ignore", category=FutureWarning)  # DeepSpeed's deprecated c10d calls
    results: dict[str, Any] = {}
    for port, jobs in zip(ports, phases, strict=True):
        os.environ["MASTER_PORT"] = str(port)  # each phase: a new process group
        info = init_distributed(use_cuda=False)
        for job in jobs:
            runner = run_train_job if isinstance(job, TrainJob) else run_job
            results[job.name] = runner(job, info.device)
        # Peak resident memory of each rank, for the benchmark (a collective: every rank).
        results["_peak_rss_mb"] = _gather_peak_rss(world if dist.is_initialized() else 1)
        _teardown()
    if int(os.environ["RANK"]) == 0:
        Path(out).write_text(json.dumps(results))
    leave()


def leave() -> None:
    """End a spawned rank that finished, without the interpreter's teardown: a gloo group's
    C++ threads destroyed there, after Python's finalization, abort the process now and then
    ("terminate called without an active exception", SIGABRT; ~1 run in 5 of
    bench/resume_fetch.py on a busy box). Results go to disk; the exit code is all the
    parent reads."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _gather_peak_rss(world: int) -> list[int]:
    # Linux reports ru_maxrss in KiB.
    mine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    rss = [mine] * world
    if world > 1:
        dist.all_gather_object(rss, mine)
    return rss


def _teardown() -> None:
    if not dist.is_initialized():
        return
    dist.barrier()
    if "deepspeed.comm" in sys.modules:
        # Also drops DeepSpeed's cached sub-groups, so a later group starts clean.
        import deepspeed.comm

        deepspeed.comm.destroy_process_group()
    else:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(
    world: int, jobs: list[Any], out_dir: Path, *, then: list[Any] | None = None
) -> dict[str, Any]:
    """Run ``jobs`` in order in one fresh process group of ``world`` CPU ranks; then, if
    given, ``then`` in a second, new process group in the same processes (saves a restart:
    importing torch, transformers and DeepSpeed costs more than the runs)."""
    out = out_dir / f"results-{world}-{jobs[0].name}.json"
    phases = [jobs] if then is None else [jobs, then]
    ports = [free_port() for _ in phases]
    mp.spawn(_worker, args=(world, ports, phases, str(out)), nprocs=world, join=True)
    return dict(json.loads(out.read_text()))
