"""``shunter download JOB``: fetch a job's final (or best) model into a local folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from shunter.cli.common import JobArg, JsonOpt, TokenOpt, UrlOpt, api, merge_opts, out, print_json

__all__ = ["download"]


def download(
    job_id: JobArg,
    checkpoint: Annotated[
        str, typer.Option("--checkpoint", "-c", help="final, or best (load_best_model_at_end)")
    ] = "final",
    dest: Annotated[Path, typer.Option("--out", "-o", help="Folder to unpack into.")] = Path("."),
    url: UrlOpt = None,
    token: TokenOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Download a job's model (HF layout: from_pretrained loads the folder; PEFT for LoRA)."""
    opts = merge_opts(url, token, json_)
    with api(opts) as client:
        folder = client.download_model(job_id, dest, checkpoint=checkpoint)
    if opts.json:
        print_json({"path": str(folder)})
    else:
        out.print(f"model in {folder}")
