"""``python -m trainer_core --spec job.yaml [--output-dir DIR] [--tokenizer DIR]``.

``python -m trainer_core export-checkpoint --spec job.json --checkpoint DIR --out DIR`` writes
a step checkpoint of that spec's job as a model (``trainer_core.consolidate``): one process,
CPU, any world size or strategy the checkpoint was written with.

Under ``torchrun --nproc_per_node N`` every rank runs this; plain ``python`` is one process.
Reads a JobSpec (YAML or JSON) with the service's strict parser, validates it with the
service's rules (``shunter.jobspec``; ``resources`` are this run's: the world size from
``WORLD_SIZE`` and one GPU per rank with CUDA), trains with a ``JsonlReporter`` (stdout +
``<output_dir>/metrics.jsonl`` on rank 0) and resumes from the newest verified checkpoint in
``output_dir`` if there is one. ``--output-dir`` overrides ``training.output_dir`` (default
``shunter-output``); ``--tokenizer`` overrides ``model.tokenizer`` (e.g. a tokenizer that
lives in an installed package's folder). A bad spec exits 2 with every error, one per line.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Any

import torch

from shunter.jobspec import SpecError
from shunter.jobspec.parse import BodyError, parse_body
from trainer_core.config import TrainConfig, local_spec
from trainer_core.loop import train
from trainer_core.reporter import JsonlReporter

_DEFAULT_OUTPUT = Path("shunter-output")


def _read_spec(path: Path) -> dict[str, Any]:
    kind = "application/json" if path.suffix.lower() == ".json" else "application/yaml"
    try:
        spec: dict[str, Any] = parse_body(path.read_bytes(), kind)
    except BodyError as exc:
        raise SystemExit(f"{path}: {exc.message}") from None
    return spec


def export_main(argv: list[str]) -> int:
    """``export-checkpoint``: the model of a step checkpoint in the final-model layout."""
    from shunter.jobspec import ModelSpec
    from trainer_core.consolidate import export_checkpoint

    parser = argparse.ArgumentParser(prog="python -m trainer_core export-checkpoint")
    parser.add_argument("--spec", type=Path, required=True, help="the job's JobSpec")
    parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint-<step> dir")
    parser.add_argument("--out", type=Path, required=True, help="where to write the model")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raw = _read_spec(args.spec)
    # Only the model section matters here; the job's resources need not match this process.
    model_cfg = ModelSpec.model_validate(raw.get("model") or {})
    seed = int((raw.get("training") or {}).get("seed") or 0)
    try:
        export_checkpoint(model_cfg, args.checkpoint, args.out, seed=seed)
    except ValueError as exc:
        print(f"{args.checkpoint}: {exc}", file=sys.stderr)
        return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["export-checkpoint"]:
        return export_main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m trainer_core", description=__doc__)
    parser.add_argument("--spec", type=Path, required=True, help="JobSpec YAML or JSON")
    parser.add_argument("--output-dir", type=Path, help="overrides training.output_dir")
    parser.add_argument("--tokenizer", help="overrides model.tokenizer (local dir or hub id)")
    parser.add_argument(
        "--cache-dir", type=Path, help="tokenised-data cache (default <output_dir>/.cache)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    raw = _read_spec(args.spec)
    if args.tokenizer is not None:
        raw["model"] = {**(raw.get("model") or {}), "tokenizer": args.tokenizer}
    try:
        spec = local_spec(
            raw, world_size=int(os.environ.get("WORLD_SIZE", "1")), cuda=torch.cuda.is_available()
        )
    except SpecError as exc:
        for err in exc.errors:
            print(f"{args.spec}: {err.loc}: {err.message}", file=sys.stderr)
        return 2
    output_dir = args.output_dir or spec.training.output_dir or _DEFAULT_OUTPUT
    cfg = TrainConfig.from_spec(spec, output_dir=output_dir, cache_dir=args.cache_dir)
    result = train(cfg, JsonlReporter(cfg.output_dir))
    logging.getLogger("trainer_core").info(
        "done: step %d, final model in %s", result.global_step, result.final_model_dir
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
