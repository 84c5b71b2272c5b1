"""Pass 2 safety checks of a local model folder: no remote code, no pickle, config-only overrides.

A model folder under a data root is data only while transformers can load it with
``trust_remote_code=False`` from safetensors. So, for a local ``model.name_or_path`` (and a
local ``model.tokenizer``):

- ``config.json`` / ``tokenizer_config.json`` with ``auto_map`` (custom modelling or
  tokenizer code) → 422;
- weights only in pickle files (``*.bin``, ``*.pt``, ``*.pth``, ``*.ckpt``, ``*.pkl``) and
  no ``*.safetensors`` → 422 unless the admin setting ``SHUNTER_ALLOW_PICKLE_WEIGHTS`` is on;
- ``model.config_overrides`` keys must be fields of that folder's ``model_type``
  (``shunter.jobspec.safety``; pass 1 only knew "some model's field").

Pure filesystem reads; nothing is written.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from shunter.jobspec import FieldError, JobSpec
from shunter.jobspec.safety import config_override_errors

__all__ = ["model_folder_errors"]

_MAX_JSON_BYTES = 4 * 1024 * 1024
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def model_folder_errors(spec: JobSpec, *, allow_pickle_weights: bool) -> list[FieldError]:
    """Every safety problem of the spec's local model and tokenizer folders."""
    m = spec.model
    errors: list[FieldError] = []
    for loc, path in (("model.name_or_path", m.name_or_path), ("model.tokenizer", m.tokenizer)):
        if (
            path is None
            or not os.path.isdir(path)
            or (loc == "model.tokenizer" and path == m.name_or_path)
        ):
            continue
        folder = Path(path)
        for name in ("config.json", "tokenizer_config.json"):
            if "auto_map" in _json_object(folder / name):
                errors.append(
                    FieldError(
                        loc,
                        f"{name} has auto_map: the model needs custom code "
                        "(trust_remote_code), which this service never runs; use a model "
                        "architecture transformers supports natively",
                    )
                )
    path = m.name_or_path
    if path is None or not os.path.isdir(path):
        return errors
    folder = Path(path)
    if not m.from_scratch and not allow_pickle_weights and _pickle_only(folder):
        errors.append(
            FieldError(
                "model.name_or_path",
                "has weights only in pickle files (.bin/.pt), which can run code when loaded; "
                "convert them to model.safetensors (or an admin sets "
                "SHUNTER_ALLOW_PICKLE_WEIGHTS=true)",
            )
        )
    model_type = _json_object(folder / "config.json").get("model_type")
    if isinstance(model_type, str):
        overrides = {k: v for k, v in m.config_overrides.items() if k != "model_type"}
        errors += config_override_errors(overrides, model_type=model_type)
    return errors


def _pickle_only(folder: Path) -> bool:
    names = os.listdir(folder)
    if any(n.endswith(".safetensors") or n.endswith(".safetensors.index.json") for n in names):
        return False
    return any(n.endswith(_PICKLE_SUFFIXES) or n.endswith(".bin.index.json") for n in names)


def _json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; ``{}`` when absent or unreadable (other checks say why)."""
    try:
        if path.stat().st_size > _MAX_JSON_BYTES:
            return {}
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
