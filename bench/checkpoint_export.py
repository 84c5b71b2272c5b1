"""Time of a step-checkpoint download's consolidation (``trainer_core export-checkpoint``).

Trains one AdamW step of a Llama from config (hidden ``--hidden``, ``--layers`` layers, the
MiniLM WordPiece vocabulary: nothing downloaded) with a checkpoint at step 1, then runs the
export the API runs on a first download, and prints the checkpoint and model sizes and the
child's wall and CPU seconds (user + sys), next to a bare ``import torch, transformers,
peft`` for what is start-up alone. CPU seconds are the figure on a shared machine.
``--quick``: hidden 64, 2 layers (a smoke run; its figures mean little).

    python bench/checkpoint_export.py [--hidden 512 --layers 8] [--quick] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "trainer_core"))

from tc_helpers import MINILM, write_corpus  # noqa: E402


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    cpu, wall = _cpu(), time.monotonic()
    subprocess.run(cmd, check=True, env=env, capture_output=True, cwd=REPO)
    return time.monotonic() - wall, _cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    hidden, layers = (64, 2) if args.quick else (args.hidden, args.layers)
    root = args.dir or Path(tempfile.mkdtemp(prefix="ckpt-export-"))
    spec = {
        "model": {
            "tokenizer": MINILM,
            "task": "causal-lm",
            "from_scratch": True,
            "config_overrides": {
                "model_type": "llama",
                "hidden_size": hidden,
                "intermediate_size": hidden * 8 // 3,
                "num_hidden_layers": layers,
                "num_attention_heads": 8,
                "num_key_value_heads": 8,
                "max_position_embeddings": 64,
            },
        },
        "data": {"train": {"path": str(write_corpus(root / "c.txt"))}, "max_length": 24},
        "training": {
            "output_dir": str(root / "run"),
            "max_steps": 1,
            "per_device_train_batch_size": 2,
            "save_strategy": "steps",
            "save_steps": 1,
            "seed": 1,
        },
    }
    spec_path = root / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    ckpt = root / "run" / "checkpoint-1"
    if not ckpt.exists():
        _timed([sys.executable, "-m", "trainer_core", "--spec", str(spec_path)], env)
    py = sys.executable
    imports = _timed([py, "-c", "import torch, transformers, peft"], env)
    out = root / "hf"
    export = [py, "-m", "trainer_core", "export-checkpoint", "--spec", str(spec_path)]
    wall, cpu = _timed([*export, "--checkpoint", str(ckpt), "--out", str(out)], env)
    size = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    weights = (out / "model.safetensors").stat().st_size
    print(f"llama hidden {hidden} x {layers} layers; checkpoint {size / 1e6:.0f} MB")
    print(f"export-checkpoint: wall {wall:.1f} s, cpu {cpu:.1f} s -> {weights / 1e6:.0f} MB")
    print(f"imports alone:     wall {imports[0]:.1f} s, cpu {imports[1]:.1f} s")


if __name__ == "__main__":
    main()
