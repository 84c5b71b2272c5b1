"""Facts read from a local Hugging Face model or tokenizer folder with the stdlib alone.

``read_config(folder)``: its ``config.json`` as a dict. ``tokenizer_size(folder)``:
``len(tokenizer)`` of ``AutoTokenizer.from_pretrained(folder)`` (what trainer_core sizes a
from-scratch vocabulary to), from ``tokenizer.json``: the distinct strings of the model's
vocabulary, its added tokens and the special tokens ``tokenizer_config.json`` /
``special_tokens_map.json`` name (transformers adds those missing from the vocabulary).

Both return None when the file is absent, too large, or not of the expected shape: the
caller reports the count as unknown. Read-only; no torch, no transformers. The caller
decides which folders may be read (the service only passes paths its pass 2 resolved inside
the data roots).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_config", "tokenizer_size"]

_CONFIG_MAX_BYTES = 4 * 1024**2  # a config.json is a few KiB
_TOKENIZER_MAX_BYTES = 64 * 1024**2  # large vocabularies' tokenizer.json run to tens of MiB
_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                 "mask_token")  # fmt: skip


def read_config(folder: str | Path) -> dict[str, Any] | None:
    """The folder's ``config.json`` object; None if absent, unreadable or too large."""
    return _json_object(Path(folder) / "config.json", _CONFIG_MAX_BYTES)


def tokenizer_size(folder: str | Path) -> int | None:
    """``len(tokenizer)`` of the folder's fast tokenizer; None without a ``tokenizer.json``."""
    root = Path(folder)
    data = _json_object(root / "tokenizer.json", _TOKENIZER_MAX_BYTES)
    if data is None or not isinstance(data.get("model"), dict):
        return None
    vocab = data["model"].get("vocab")
    tokens: set[str] = set()
    if isinstance(vocab, dict):  # BPE, WordPiece, WordLevel: token -> id
        tokens.update(vocab)
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs
        tokens.update(p[0] for p in vocab if isinstance(p, list) and p and isinstance(p[0], str))
    else:
        return None
    for added in data.get("added_tokens") or []:
        if isinstance(added, dict) and isinstance(added.get("content"), str):
            tokens.add(added["content"])
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        tokens.update(_special_tokens(_json_object(root / name, _CONFIG_MAX_BYTES) or {}))
    return len(tokens)


def _special_tokens(config: dict[str, Any]) -> set[str]:
    """Special-token strings a tokenizer config names (plain or ``{"content": ...}``)."""
    found: set[str] = set()
    values: list[Any] = [config.get(k) for k in _SPECIAL_KEYS]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = config.get(key)
        if isinstance(extra, list):
            values += extra
        elif isinstance(extra, dict):
            values += list(extra.values())
    decoder = config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        values += list(decoder.values())
    for value in values:
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str) and value:
            found.add(value)
    return found


def _json_object(path: Path, max_bytes: int) -> dict[str, Any] | None:
    try:
        if path.stat().st_size > max_bytes:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
