"""MFU of bf16 FSDP2 training through our engine, against HF Trainer in the same run.

CUDA (default): a ~1B-parameter Llama (Llama-3.2-1B shape, 32k vocab, random init from
config, nothing downloaded), bf16 FSDP2 (``--mixed-precision params``, the default here:
``MixedPrecisionPolicy(bf16, fp32 reduce)``, torchtitan's recipe; ``autocast``, the spec's
default, gathers fp32 parameters and autocasts as DDP does) on a 1-rank NCCL group (or
``torchrun --nproc_per_node N``), sequence 2048, fused AdamW, a distinct batch every step
(the same rows for every engine), ``use_cache=False``. Variants:
``fsdp2`` (eager), ``fsdp2+compile`` (``torch.compile`` on each transformer block before
sharding, as torchtitan does), and ``hf-trainer`` (the same model, batch, sequence, bf16 and
AdamW under ``transformers.Trainer``); tokens/s ratios are printed against the HF run.

``--mode sft``: chat SFT on the same synthetic conversations (lengths 64..seq/2 tokens, the
prompt quarter masked out of the labels): our engine on packed rows (documents concatenated
and cut into seq-token rows, as ``data.packing`` does) vs HF Trainer on unpacked rows padded
to the longest in each batch. Compared on useful tokens/s (tokens that carry a label).

FLOPs (torchtitan's count): per token 6 x (parameters - input embedding) + 12 x L x H x S
(attention scores and values, causal masking not discounted); the plain 6N figure is printed
too. MFU denominator: 989 TFLOP/s per GPU, the H100 SXM datasheet dense bf16 figure, whatever
the GPU (``--peak-tflops`` overrides; the output says which was used).

Without CUDA it prints ``skipped: no CUDA`` and exits 0. ``--smoke``: a tiny Llama on CPU
(fp32, gloo) for a couple of steps, every variant but compile, so the code path cannot rot
(``tests/bench/test_mfu_smoke.py``); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from trainer_core.parallel import ParallelConfig, build_engine, init_distributed
from trainer_core.parallel.blocks import find_blocks
from trainer_core.parallel.config import FsdpMixedPrecision

# The MFU denominator (issue #21): H100 SXM datasheet dense (no sparsity) bf16 TFLOP/s.
PEAK_BF16_TFLOPS = 989.0

ONE_B = {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}  # fmt: skip
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 256,
        "max_position_embeddings": 256, "tie_word_embeddings": False}  # fmt: skip


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny model on CPU, a couple of steps")
    p.add_argument("--mode", choices=("pretrain", "sft"), default="pretrain")
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 10; smoke 2)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (default 3; smoke 1)")
    p.add_argument("--seq-len", type=int, default=None, help="default 2048 GPU, 128 smoke")
    p.add_argument("--batch", type=int, default=None, help="per-rank batch (default 8; smoke 2)")
    p.add_argument("--peak-tflops", type=float, default=None, help="override the denominator")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    p.add_argument("--no-hf", action="store_true", help="skip the HF Trainer baseline")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument(
        "--mixed-precision",
        choices=("params", "autocast", "both"),
        default="params",
        help="distributed.fsdp.mixed_precision of our runs (default params, torchtitan's "
        "recipe; autocast is the spec's default, DDP's numbers); both: each, one after another",
    )
    return p.parse_args()


def _peak_cpu_tflops() -> tuple[float, str]:
    """Best fp32 matmul rate of this process's threads, a practical CPU peak."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(4):
            a @ b
        best = max(best, 4 * 2 * 1024**3 / (time.perf_counter() - start))
    return best / 1e12, f"measured fp32 matmul, {torch.get_num_threads()} threads"


def _ensure_group(cuda: bool) -> None:
    """torchrun sets WORLD_SIZE; a plain ``python bench/mfu.py`` gets a 1-rank group so FSDP2
    (which needs a device mesh) is really applied."""
    if "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl" if cuda else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class Setup:
    cuda: bool
    device: torch.device
    shape: dict[str, Any]
    seq: int
    batch: int
    steps: int
    warmup: int
    ac: bool


def _model(setup: Setup) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    with setup.device:  # initialise directly on the GPU: seconds, not minutes, for 1B
        # use_cache off for both engines: training reads no KV cache (and building one each
        # forward makes Dynamo recompile on the cache's state).
        model = LlamaForCausalLM(
            LlamaConfig(**setup.shape, attn_implementation="sdpa", use_cache=False)
        )
    if setup.ac:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _sync(setup: Setup) -> None:
    if setup.cuda:
        torch.cuda.synchronize()


def _ours(
    setup: Setup,
    batches: list[dict[str, torch.Tensor]],
    *,
    compile: bool,
    mixed_precision: FsdpMixedPrecision = "params",
) -> Timed:
    """Our engine (FSDP2 bf16 on CUDA); ``compile``: each block compiled before sharding."""
    model = _model(setup)
    if compile:
        for block in find_blocks(model):
            block.compile()
    cfg = ParallelConfig(
        strategy="fsdp",
        bf16=setup.cuda,
        micro_batch_size=setup.batch,
        fsdp_mixed_precision=mixed_precision if setup.cuda else "autocast",
    )
    engine = build_engine(model, cfg, make_optimizer=lambda m: torch.optim.AdamW(
        m.parameters(), lr=1e-4, fused=True), device=setup.device)  # fmt: skip
    if setup.cuda:
        torch.cuda.reset_peak_memory_stats()
    losses: list[torch.Tensor] = []
    start = time.perf_counter()
    for step in range(setup.warmup + setup.steps):
        if step == setup.warmup:
            _sync(setup)
            start = time.perf_counter()
        batch = {k: v.to(setup.device) for k, v in batches[step % len(batches)].items()}
        loss = engine.forward(**batch).loss
        engine.backward(loss)
        engine.clip_and_step(1.0)
        losses.append(loss.detach())
    _sync(setup)
    elapsed = time.perf_counter() - start
    mem = torch.cuda.max_memory_allocated() / 2**30 if setup.cuda else 0.0
    del engine, model
    if setup.cuda:
        torch.cuda.empty_cache()
    return Timed(elapsed, losses[0].item(), losses[-1].item(), mem)


def _hf(setup: Setup, batches: list[dict[str, torch.Tensor]]) -> Timed | str:
    """The same model under ``transformers.Trainer``: bf16, AdamW (fused), same batches."""
    try:
        from transformers import Trainer, TrainerCallback, TrainingArguments
    except ImportError as e:  # Trainer needs accelerate
        return f"skipped ({e})"
    import tempfile

    class Clock(TrainerCallback):  # type: ignore[misc]
        start = 0.0
        first = last = float("nan")

        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if state.global_step == setup.warmup:
                _sync(setup)
                Clock.start = time.perf_counter()

        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                Clock.last = logs["loss"]
                Clock.first = logs["loss"] if Clock.first != Clock.first else Clock.first

    rows = [{k: v[i] for k, v in b.items()} for b in batches for i in range(len(b["input_ids"]))]
    total = setup.warmup + setup.steps
    rows = (rows * (total * setup.batch // max(1, len(rows)) + 1))[: total * setup.batch]

    def collate(items: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        # HF shuffles rows across our batches: pad to the longest row of this batch.
        width = max(len(it["input_ids"]) for it in items)
        fill = {"labels": -100}
        return {
            k: torch.stack(
                [F.pad(it[k], (0, width - len(it[k])), value=fill.get(k, 0)) for it in items]
            )
            for k in items[0]
        }

    model = _model(setup)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(
            output_dir=out, per_device_train_batch_size=setup.batch, max_steps=total,
            learning_rate=1e-4, bf16=setup.cuda, optim="adamw_torch_fused", max_grad_norm=1.0,
            logging_steps=1, save_strategy="no", report_to=[], dataloader_drop_last=True,
            use_cpu=not setup.cuda, disable_tqdm=True, lr_scheduler_type="constant",
        )  # fmt: skip
        trainer = Trainer(model=model, args=args, train_dataset=rows, data_collator=collate,
                          callbacks=[Clock()])  # fmt: skip
        trainer.train()
    _sync(setup)
    elapsed = time.perf_counter() - Clock.start
    del trainer, model
    if setup.cuda:
        torch.cuda.empty_cache()
    return Timed(elapsed, Clock.first, Clock.last, 0.0)


@dataclass(frozen=True)
class Timed:
    seconds: float
    first_loss: float
    last_loss: float
    peak_gib: float


def _pretrain_batches(setup: Setup) -> list[dict[str, torch.Tensor]]:
    """One distinct batch per step (warm-up and timed), the same rows for every engine: no
    engine sees a repeated batch it could memorise."""
    gen = torch.Generator().manual_seed(dist.get_rank())
    shape = (setup.batch, setup.seq)
    out = []
    for _ in range(setup.warmup + setup.steps):
        ids = torch.randint(0, setup.shape["vocab_size"], shape, generator=gen)
        out.append({"input_ids": ids, "labels": ids})
    return out


def _conversations(setup: Setup, n_tokens: int) -> list[tuple[list[int], list[int]]]:
    """Synthetic chats: (prompt, answer) token lists, lengths 64..seq/2, about n_tokens."""
    gen = torch.Generator().manual_seed(dist.get_rank())
    vocab, out, total = setup.shape["vocab_size"], [], 0
    low = min(64, setup.seq // 4)
    while total < n_tokens:
        n = int(torch.randint(low, setup.seq // 2 + 1, (1,), generator=gen))
        doc = torch.randint(3, vocab, (n,), generator=gen).tolist()
        cut = n // 4  # the prompt quarter: no loss on it
        out.append((doc[:cut], doc[cut:]))
        total += n
    return out


def _packed(
    setup: Setup, chats: list[tuple[list[int], list[int]]]
) -> list[dict[str, torch.Tensor]]:
    ids: list[int] = []
    labels: list[int] = []
    for prompt, answer in chats:
        ids += prompt + answer + [2]  # eos between documents
        labels += [-100] * len(prompt) + answer + [2]
    rows = len(ids) // setup.seq
    t = torch.tensor(ids[: rows * setup.seq]).view(rows, setup.seq)
    lab = torch.tensor(labels[: rows * setup.seq]).view(rows, setup.seq)
    return [{"input_ids": t[i : i + setup.batch], "labels": lab[i : i + setup.batch]}
            for i in range(0, rows - setup.batch + 1, setup.batch)]  # fmt: skip


def _padded(
    setup: Setup, chats: list[tuple[list[int], list[int]]]
) -> list[dict[str, torch.Tensor]]:
    out = []
    for i in range(0, len(chats) - setup.batch + 1, setup.batch):
        group = chats[i : i + setup.batch]
        width = max(len(p) + len(a) + 1 for p, a in group)
        ids = torch.zeros(len(group), width, dtype=torch.long)
        lab = torch.full((len(group), width), -100)
        mask = torch.zeros(len(group), width, dtype=torch.long)
        for r, (p, a) in enumerate(group):
            n = len(p) + len(a) + 1
            ids[r, :n] = torch.tensor([*p, *a, 2])
            lab[r, len(p) : n] = torch.tensor([*a, 2])
            mask[r, :n] = 1
        out.append({"input_ids": ids, "labels": lab, "attention_mask": mask})
    return out


def _useful(batches: list[dict[str, torch.Tensor]], setup: Setup) -> float:
    """Labelled tokens per timed step, averaged over the timed steps' batches."""
    counts = [int((b["labels"] != -100).sum()) for b in batches]
    timed = [counts[s % len(counts)] for s in range(setup.warmup, setup.warmup + setup.steps)]
    return sum(timed) / len(timed)


def main() -> None:
    args = _args()
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        print("skipped: no CUDA (bench/mfu.py measures a GPU; --smoke runs a tiny CPU check)")
        return
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    _ensure_group(cuda)
    info = init_distributed(use_cuda=cuda)
    setup = Setup(
        cuda=cuda, device=info.device, shape=ONE_B if cuda else TINY,
        seq=args.seq_len or (2048 if cuda else 64), batch=args.batch or (8 if cuda else 2),
        steps=args.steps or (10 if cuda else 2), warmup=args.warmup or (3 if cuda else 1),
        ac=args.activation_checkpointing,
    )  # fmt: skip
    if args.peak_tflops:
        peak, peak_source = args.peak_tflops, "--peak-tflops"
    elif cuda:
        peak, peak_source = PEAK_BF16_TFLOPS, "H100 SXM datasheet dense bf16, used for any GPU"
    else:
        peak, peak_source = _peak_cpu_tflops()
    world = dist.get_world_size()
    L, H = setup.shape["num_hidden_layers"], setup.shape["hidden_size"]
    probe = _model(setup)
    n_params = sum(p.numel() for p in probe.parameters())
    n_embed = probe.get_input_embeddings().weight.numel()
    del probe
    flops_per_token = 6 * (n_params - n_embed) + 12 * L * H * setup.seq
    if info.rank == 0:
        device = torch.cuda.get_device_name() if cuda else "CPU (smoke: figures mean nothing)"
        print(f"device: {device} x{world}; torch {torch.__version__}; model: Llama "
              f"{n_params / 1e9:.3f}B params (L={L}, H={H}), seq {setup.seq}, batch "
              f"{setup.batch}/rank, {'bf16' if cuda else 'fp32'}; mode {args.mode}"
              f"{', activation checkpointing' if setup.ac else ''}")  # fmt: skip
        print(f"MFU denominator: {peak:.1f} TFLOP/s per device ({peak_source}); FLOPs/token "
              f"= 6 x (params - embedding) + 12 x L x H x seq = {flops_per_token / 1e9:.2f} "
              f"GFLOP")  # fmt: skip
        print(f"steps: {setup.steps} timed after {setup.warmup} warm-up")

    if args.mode == "pretrain":
        ours_b = hf_b = _pretrain_batches(setup)
    else:
        chats = _conversations(setup, (setup.warmup + setup.steps + 1) * setup.batch * setup.seq)
        ours_b, hf_b = _packed(setup, chats), _padded(setup, chats)
    runs: dict[str, tuple[Timed | str, list[dict[str, torch.Tensor]]]] = {}
    precisions: list[FsdpMixedPrecision] = (
        ["params", "autocast"] if args.mixed_precision == "both" else [args.mixed_precision]
    )
    for mp in precisions:
        tag = "" if mp == "params" else " (autocast)"
        runs["fsdp2" + tag] = (_ours(setup, ours_b, compile=False, mixed_precision=mp), ours_b)
        if cuda and not args.no_compile:
            runs["fsdp2+compile" + tag] = (
                _ours(setup, ours_b, compile=True, mixed_precision=mp),
                ours_b,
            )
    if not args.no_hf and world == 1:
        runs["hf-trainer"] = (_hf(setup, hf_b), hf_b)
    if info.rank == 0:
        _report(runs, setup, args.mode, flops_per_token, n_params, peak, world)
    dist.destroy_process_group()


def _report(
    runs: dict[str, tuple[Timed | str, list[dict[str, torch.Tensor]]]],
    setup: Setup,
    mode: str,
    flops_per_token: int,
    n_params: int,
    peak: float,
    world: int,
) -> None:
    hf = runs.get("hf-trainer", ("absent", []))[0]
    for name, (t, batches) in runs.items():
        if isinstance(t, str):
            print(f"{name}: {t}")
            continue
        tokens = setup.batch * setup.seq if mode == "pretrain" else _useful(batches, setup)
        tps = tokens * setup.steps * world / t.seconds
        line = f"{name}: {t.seconds / setup.steps * 1e3:.1f} ms/step, "
        if mode == "pretrain":
            mfu = flops_per_token * tps / (peak * 1e12 * world)
            mfu_6n = 6 * n_params * tps / (peak * 1e12 * world)
            tflops = flops_per_token * tps / world / 1e12
            line += f"{tps:,.0f} tokens/s, {tflops:.1f} TFLOP/s/device, MFU {mfu:.1%} "
            line += f"(6N MFU {mfu_6n:.1%})"
        else:
            line += f"{tps:,.0f} useful (labelled) tokens/s"
        if not isinstance(hf, str) and name != "hf-trainer":
            hf_tokens = (
                setup.batch * setup.seq if mode == "pretrain" else _useful(hf_b(runs), setup)
            )
            line += f", {tps / (hf_tokens * setup.steps * world / hf.seconds):.2f}x HF Trainer"
        line += f"; loss {t.first_loss:.3f} -> {t.last_loss:.3f}"
        if t.peak_gib:
            line += f"; peak memory {t.peak_gib:.1f} GiB"
        print(line)


def hf_b(
    runs: dict[str, tuple[Timed | str, list[dict[str, torch.Tensor]]]],
) -> list[dict[str, torch.Tensor]]:
    return runs["hf-trainer"][1]


if __name__ == "__main__":
    main()
