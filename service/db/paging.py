"""Opaque cursors: ``base64url(json({"k": <last key>}))``. Clients never parse them."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from service.errors import BadRequest

__all__ = ["clamp_limit", "decode_cursor", "encode_cursor"]


def encode_cursor(key: Any) -> str:
    raw = json.dumps({"k": key}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str | None, kind: type) -> Any:
    """The key inside ``cursor`` (``None`` for no cursor); ``BadRequest`` if it is not ours."""
    if cursor is None or cursor == "":
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        key = json.loads(raw)["k"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise BadRequest("cursor: not a cursor this API issued", detail="bad_cursor") from exc
    if not isinstance(key, kind) or isinstance(key, bool):
        raise BadRequest("cursor: not a cursor this API issued", detail="bad_cursor")
    return key


def clamp_limit(limit: int | None, *, default: int, maximum: int) -> int:
    if limit is None:
        return default
    return max(1, min(limit, maximum))
