"""The models ``/v1/models`` lists and ``/v1/fine_tuning/jobs`` accepts as ``model``.

A catalog entry maps an id to a JobSpec ``model`` section (path or hub id, task,
from-scratch config) and defaults for the job it becomes (``data``, ``training``,
``resources``). The built-in ``shunter-tiny-llama`` (a 2-layer Llama from config over the
bundled MiniLM WordPiece tokenizer, which ``$SHUNTER_HOME`` seeding links into the default
data root) works offline on a fresh server. An admin adds models with a JSON or YAML file
named by ``SHUNTER_MODEL_CATALOG``: ``{"models": [{"id": ..., "model": {...},
"defaults": {...}}]}``; an entry with a built-in's id replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from service.errors import Unprocessable

__all__ = ["BUILTIN", "CatalogModel", "load_catalog"]

_CREATED = 1795392000  # 2026-11-21, when the built-in entry was defined (OpenAI's `created`)


@dataclass(frozen=True, kw_only=True)
class CatalogModel:
    id: str
    model: dict[str, Any]  # a JobSpec `model` section; its task is chat-sft for OpenAI jobs
    defaults: dict[str, Any] = field(default_factory=dict)  # data / training / resources
    created: int = _CREATED
    owned_by: str = "shunter"


BUILTIN: dict[str, CatalogModel] = {
    "shunter-tiny-llama": CatalogModel(
        id="shunter-tiny-llama",
        model={
            "tokenizer": "models/all-MiniLM-L6-v2",
            "task": "chat-sft",
            "from_scratch": True,
            "config_overrides": {
                "model_type": "llama",
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 4,
                "vocab_size": 30522,
                "max_position_embeddings": 256,
            },
        },
        defaults={
            "data": {"max_length": 128},
            "training": {
                "learning_rate": 1e-3,
                "num_train_epochs": 3,
                "per_device_train_batch_size": 4,
                "logging_steps": 1,
            },
            "resources": {"num_workers": 1, "gpus_per_worker": 0, "cpus_per_worker": 1},
        },
    )
}


def load_catalog(path: Path | None) -> dict[str, CatalogModel]:
    """The built-in entries, overlaid with the admin's file (if any)."""
    models = dict(BUILTIN)
    if path is None:
        return models
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise Unprocessable(f"SHUNTER_MODEL_CATALOG {path}: cannot read it ({exc})") from None
    entries = doc.get("models") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise Unprocessable(f"SHUNTER_MODEL_CATALOG {path}: needs a top-level `models` list")
    for i, entry in enumerate(entries):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("id"), str)
            and isinstance(entry.get("model"), dict)
        ):
            raise Unprocessable(f"SHUNTER_MODEL_CATALOG {path}: models[{i}] needs id and model")
        models[entry["id"]] = CatalogModel(
            id=entry["id"],
            model=dict(entry["model"]),
            defaults=dict(entry.get("defaults") or {}),
            owned_by=str(entry.get("owned_by", "shunter")),
        )
    return models
