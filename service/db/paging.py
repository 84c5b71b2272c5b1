"""Pages: opaque cursors (``base64url(json({"k": <last key>}))``; clients never parse them),
and one page read (``fetch_page``: ``limit + 1`` rows asked, ``limit`` kept, whether more
follow) with its next cursor (``next_cursor``)."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from sqlalchemy import Select
from sqlalchemy.orm import InstrumentedAttribute, Session

from service.errors import BadRequest

__all__ = [
    "clamp_limit",
    "decode_cursor",
    "encode_cursor",
    "fetch_page",
    "keyset_page",
    "next_cursor",
    "page_after",
]


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


def fetch_page(
    session: Session, stmt: Select[*tuple[Any, ...]], limit: int, *, rows: bool = False
) -> tuple[list[Any], bool]:
    """One page of ``stmt`` (ordered by the caller): at most ``limit`` results (its first
    column's, or whole ``rows``), and whether more follow (one more was asked for)."""
    result = session.execute(stmt.limit(limit + 1))
    found = list(result.all() if rows else result.scalars())
    return found[:limit], len(found) > limit


def next_cursor(page: list[Any], more: bool) -> str | None:
    """The cursor of the page after ``page`` (keyed by its last row's ``id``), or None."""
    return encode_cursor(page[-1].id) if more and page else None


def page_after(
    session: Session,
    stmt: Select[*tuple[Any, ...]],
    key: InstrumentedAttribute[Any],
    *,
    after: Any,
    limit: int,
    newest_first: bool = False,
    rows: bool = False,
) -> tuple[list[Any], bool]:
    """One page of ``stmt`` (ordered by ``key``): the results whose key follows ``after``
    (precedes it, ``newest_first``; None: from the start), at most ``limit``, and whether more
    follow (``fetch_page``). The OpenAI lists page this way, by the last id they gave."""
    if after is not None:
        stmt = stmt.where(key < after if newest_first else key > after)
    return fetch_page(session, stmt, limit, rows=rows)


def keyset_page(
    session: Session,
    stmt: Select[*tuple[Any, ...]],
    key: InstrumentedAttribute[Any],
    *,
    cursor: str | None,
    limit: int,
    kind: type = int,
    newest_first: bool = False,
) -> tuple[list[Any], str | None]:
    """``page_after`` the key in ``cursor`` (one of ours; ``kind``: the key's type, ``int`` or
    ``str``): the page's rows and the next page's cursor (None on the last page)."""
    after = decode_cursor(cursor, kind)
    found, more = page_after(
        session, stmt, key, after=after, limit=limit, newest_first=newest_first
    )
    return found, next_cursor(found, more)
