"""Hugging Face Hub models and datasets: one download per node, then local reads.

``HF_HOME`` is one cache per node that every worker of every job shares (the launcher sets
it). ``snapshot(repo_id, repo_type=...)`` takes a file lock named after the repository in
that cache, so the first worker downloads while the others on the node wait and then find
the files in place (``huggingface_hub`` resolves them from the cache; with
``HF_HUB_OFFLINE=1`` it never touches the network and a repository that is not cached is an
error naming it). ``fetch_models(model_cfg)`` does that for a hub model and tokenizer before
anyone calls ``from_pretrained``; ``load_hub_dataset(source)`` reads a hub dataset from its
local snapshot with ``datasets.load_dataset`` (config and split as given).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import datasets

__all__ = ["fetch_models", "is_hub_id", "load_hub_dataset", "snapshot"]

# Model files worth fetching: weights in safetensors, configs, tokenizers. Pickle weights
# (.bin) are not prefetched; from_pretrained falls back to them only where nothing else exists.
_MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]


def is_hub_id(value: str | None) -> bool:
    """A model/tokenizer string that is not a local path (the service resolved those)."""
    return bool(value) and not os.path.isabs(str(value)) and not os.path.exists(str(value))


def snapshot(repo_id: str, *, repo_type: str, allow_patterns: list[str] | None = None) -> Path:
    """The local snapshot folder of ``repo_id``, downloaded once per node under a file lock."""
    from filelock import FileLock
    from huggingface_hub import constants, snapshot_download

    locks = Path(constants.HF_HOME) / "shunter-locks"
    locks.mkdir(parents=True, exist_ok=True)
    name = f"{repo_type}s--{repo_id.replace('/', '--')}.lock"
    with FileLock(str(locks / name)):
        folder = snapshot_download(repo_id, repo_type=repo_type, allow_patterns=allow_patterns)
    return Path(folder)


def fetch_models(model_cfg: Any) -> None:
    """Prefetch ``name_or_path`` and ``tokenizer`` when they are hub ids."""
    for value in {model_cfg.name_or_path, model_cfg.tokenizer}:
        if value is not None and is_hub_id(value):
            snapshot(value, repo_type="model", allow_patterns=_MODEL_FILES)


def load_hub_dataset(source: Any) -> datasets.Dataset:
    """``{hub, config, split}`` read from the node's snapshot of the dataset repository."""
    folder = snapshot(source.hub, repo_type="dataset")
    ds = datasets.load_dataset(str(folder), source.config, split=source.split or "train")
    if not isinstance(ds, datasets.Dataset):
        raise ValueError(f"hub dataset {source.hub!r}: split {source.split!r} is not one split")
    return ds
