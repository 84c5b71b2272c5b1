"""``shunter download JOB [--checkpoint final|best|STEP]``: fetch a job's model into a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shunter.cli.common import Opts, emit

__all__ = ["download"]

ModelArg = Annotated[
    str,
    typer.Argument(
        help="Job id, or a fine-tuned model name from the OpenAI-compatible API "
        "(ft:...; ft:...:ckpt-step-N names that checkpoint)."
    ),
]


def download(
    opts: Opts,
    job_id: ModelArg,
    checkpoint: Annotated[
        str,
        typer.Option(
            "--checkpoint",
            "-c",
            help="final, best (load_best_model_at_end), a checkpoint's id as `shunter "
            "checkpoints` lists it (step-N@A), or a step number N: that verified checkpoint as "
            "a model (its first download waits while the server consolidates it)",
        ),
    ] = "final",
    dest: Annotated[Path, typer.Option("--out", "-o", help="Folder to unpack into.")] = Path("."),
) -> None:
    """Download a job's model (HF layout: from_pretrained loads the folder; PEFT for LoRA)."""
    emit(
        opts,
        lambda client: {"path": str(client.download_model(job_id, dest, checkpoint=checkpoint))},
        lambda done: f"model in {done['path']}",
    )
