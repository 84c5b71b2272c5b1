"""Resolving a spec's local paths inside the allowed data roots.

Contract of ``resolve_location``, for each of ``model.name_or_path``, ``model.tokenizer``,
``data.train.path`` and ``data.eval.path``:

1. An absolute path is taken as given; a relative one is tried against each data root in
   order, and the first candidate that exists wins.
2. The winner's ``os.path.realpath`` (symlinks followed) must exist and lie inside one of
   the roots' real paths; anything else is an error naming the field, the resolved path
   and the allowed roots.
3. A model/tokenizer string that exists nowhere, is not absolute or ``./``/``../``, and has
   the shape of a hub id (``name`` or ``org/name``) is kept as a hub id. Data paths are
   never hub ids (the hub form of a data source is ``{hub: ...}``).

Also here: reading a local model's ``config.json`` for the attention-head count the tensor
parallel rule needs. Pure filesystem reads; nothing is written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shunter.jobspec.errors import FieldError
from shunter.jobspec.spec import HUB_ID_RE, JobSpec

__all__ = [
    "Resolved",
    "attention_heads",
    "local_model_config",
    "model_config_errors",
    "resolve_location",
    "tensor_parallel_head_errors",
]

_CONFIG_MAX_BYTES = 4 * 1024 * 1024  # a model config.json is a few KiB; refuse anything huge
_HEAD_KEYS = ("num_attention_heads", "n_head", "num_heads")
_KV_HEAD_KEYS = ("num_key_value_heads",)


@dataclass(frozen=True)
class Resolved:
    """Where a location string points: ``path`` (absolute, real) or a ``hub_id``."""

    value: str
    is_local: bool


def resolve_location(
    loc: str,
    raw: str,
    *,
    roots: Sequence[Path],
    allow_hub: bool,
    want_dir: bool,
) -> Resolved | FieldError:
    """Resolve one location string; see the module docstring for the rules."""
    explicit_local = raw.startswith(("/", "./", "../")) or raw in {".", ".."}
    candidate = _first_existing(raw, roots)
    if candidate is None:
        if allow_hub and not explicit_local and _is_hub_id(raw):
            return Resolved(raw, is_local=False)
        return _not_in_roots(loc, raw, roots)
    real = os.path.realpath(candidate)
    # Missing, dangling and outside-the-roots get one answer, with no resolved path: an
    # error must not tell a member whether a file exists elsewhere on the server.
    if not any(_inside(real, root) for root in roots) or not os.path.exists(real):
        return _not_in_roots(loc, raw, roots)
    if want_dir and not os.path.isdir(real):
        return FieldError(loc, f"{raw!r} resolves to {real}, which is not a directory")
    return Resolved(real, is_local=True)


def model_config_errors(spec: JobSpec) -> list[FieldError]:
    """A local model directory must hold a readable ``config.json``."""
    path = spec.model.name_or_path
    if path is None or not os.path.isabs(path):
        return []
    config, error = _read_config(Path(path))
    return [FieldError("model.name_or_path", error)] if config is None and error else []


def local_model_config(spec: JobSpec) -> dict[str, Any] | None:
    """A local model's ``config.json`` (None for a hub id or an unreadable config)."""
    path = spec.model.name_or_path
    if path is None or not os.path.isabs(path):
        return None
    config, _ = _read_config(Path(path))
    return config


def attention_heads(spec: JobSpec) -> tuple[int | None, int | None]:
    """(attention heads, key/value heads) from config_overrides, else a local config.json.

    ``None`` where unknown (a hub model, or a config without the key).
    """
    sources: list[dict[str, Any]] = [spec.model.config_overrides]
    path = spec.model.name_or_path
    if path is not None and os.path.isabs(path):
        config, _ = _read_config(Path(path))
        if config is not None:
            sources.append(config)
    return _first_int(sources, _HEAD_KEYS), _first_int(sources, _KV_HEAD_KEYS)


def tensor_parallel_head_errors(spec: JobSpec) -> list[FieldError]:
    """TP shards attention by heads: the TP size must divide the (key/value) head counts."""
    tp = spec.distributed.tensor_parallel_size
    if tp < 2:
        return []
    heads, kv_heads = attention_heads(spec)
    errors = []
    for what, count in (("num_attention_heads", heads), ("num_key_value_heads", kv_heads)):
        if count is not None and count % tp != 0:
            errors.append(
                FieldError(
                    "distributed.tensor_parallel_size",
                    f"must divide the model's {what} ({count}); {tp} does not",
                )
            )
    return errors


def pipeline_layer_errors(spec: JobSpec) -> list[FieldError]:
    """Pipeline stages hold equal shares of the decoder layers: the pipeline size must divide
    ``num_hidden_layers``, and the embedding may not be tied to the LM head (first and last
    stage). From config_overrides (checked in pass 1), else a local config.json; a hub
    model's is checked when the trainer starts."""
    pp = spec.distributed.pipeline_parallel_size
    path = spec.model.name_or_path
    if pp < 2 or path is None or not os.path.isabs(path):
        return []
    config, _ = _read_config(Path(path))
    if config is None:
        return []
    overrides = spec.model.config_overrides
    errors = []
    layers = _first_int([config], ("num_hidden_layers",))
    if "num_hidden_layers" not in overrides and layers is not None and layers % pp:
        errors.append(
            FieldError(
                "distributed.pipeline_parallel_size",
                f"must divide the model's decoder layers (num_hidden_layers {layers}); "
                f"{pp} does not",
            )
        )
    if "tie_word_embeddings" not in overrides and config.get("tie_word_embeddings") is True:
        errors.append(
            FieldError(
                "distributed.pipeline_parallel_size",
                "the model ties its input embedding to the LM head (tie_word_embeddings), which "
                "would sit in the first and the last stage; use pipeline_parallel_size: 1",
            )
        )
    return errors


def _not_in_roots(loc: str, raw: str, roots: Sequence[Path]) -> FieldError:
    return FieldError(
        loc,
        f"{raw!r} does not exist in any data root, or is outside the allowed data roots "
        f"{_roots_text(roots)} (symlinks followed); use a path inside one of them",
    )


def _first_existing(raw: str, roots: Sequence[Path]) -> str | None:
    if os.path.isabs(raw):
        return raw if os.path.lexists(raw) else None
    for root in roots:
        candidate = os.path.join(root, raw)
        if os.path.exists(candidate):
            return candidate
    return None


def _inside(real: str, root: Path) -> bool:
    real_root = os.path.realpath(root)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _is_hub_id(raw: str) -> bool:
    # Hugging Face forbids "--" and ".." in repo ids; a trailing "." is never a repo.
    return bool(HUB_ID_RE.fullmatch(raw)) and ".." not in raw and "--" not in raw


def _roots_text(roots: Sequence[Path]) -> str:
    return "[" + ", ".join(str(r) for r in roots) + "]" if roots else "[] (none configured)"


def _read_config(model_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    path = model_dir / "config.json"
    try:
        if path.stat().st_size > _CONFIG_MAX_BYTES:
            return None, f"{path} is larger than {_CONFIG_MAX_BYTES} bytes"
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"{model_dir} has no config.json; is it a Hugging Face model directory?"
    except (OSError, ValueError) as exc:
        return None, f"cannot read {path}: {exc}"
    if not isinstance(data, dict):
        return None, f"{path} is not a JSON object"
    return data, None


def _first_int(sources: list[dict[str, Any]], keys: tuple[str, ...]) -> int | None:
    for source in sources:
        for key in keys:
            value = source.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None
