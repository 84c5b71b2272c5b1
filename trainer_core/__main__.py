"""``python -m trainer_core --spec job.yaml [--output-dir DIR] [--tokenizer DIR]``.

Under ``torchrun --nproc_per_node N`` every rank runs this; plain ``python`` is one process.
Reads a JobSpec (YAML or JSON; only ``model``, ``data``, ``training``, ``distributed`` are
used), trains with a ``JsonlReporter`` (stdout + ``<output_dir>/metrics.jsonl`` on rank 0)
and resumes from the newest verified checkpoint in ``output_dir`` if there is one.
``--tokenizer`` / ``--output-dir`` override the spec's ``model.tokenizer`` /
``training.output_dir`` (e.g. a tokenizer that lives in an installed package's folder).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import yaml

from trainer_core.config import TrainConfig
from trainer_core.loop import train
from trainer_core.reporter import JsonlReporter


def _read_spec(path: Path) -> dict[str, Any]:
    text = path.read_text()
    spec = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(spec, dict):
        raise SystemExit(f"{path}: a JobSpec must be a mapping at the top level")
    return spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer_core", description=__doc__)
    parser.add_argument("--spec", type=Path, required=True, help="JobSpec YAML or JSON")
    parser.add_argument("--output-dir", type=Path, help="overrides training.output_dir")
    parser.add_argument("--tokenizer", help="overrides model.tokenizer (local dir or hub id)")
    parser.add_argument(
        "--cache-dir", type=Path, help="tokenised-data cache (default <output_dir>/.cache)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    spec = _read_spec(args.spec)
    if args.output_dir is not None:
        spec.setdefault("training", {})["output_dir"] = str(args.output_dir)
    if args.tokenizer is not None:
        spec.setdefault("model", {})["tokenizer"] = args.tokenizer
    cfg = dataclasses.replace(TrainConfig.from_spec(spec), cache_dir=args.cache_dir)
    result = train(cfg, JsonlReporter(cfg.output_dir))
    logging.getLogger("trainer_core").info(
        "done: step %d, final model in %s", result.global_step, result.final_model_dir
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
