"""Bearer-token auth: tokens ``shn_<random>``, stored only as SHA-256, roles admin/member/viewer.

A ``Principal`` is who is calling. ``viewer`` reads its team's jobs; ``member`` also submits,
cancels and resumes them; ``admin`` does everything across teams. Another team's job is
reported as absent (404), never forbidden, so ids do not leak.

Lookups are cached per process for ``Settings.auth_cache_seconds`` (a hot GET must not hit the
tokens table every time); a revoke clears this process's cache at once, other processes'
within that TTL.
"""

from __future__ import annotations

import enum
import hashlib
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.db.engine import Database
from service.db.tables import Team, Token, utcnow_py
from service.errors import Forbidden, NotFound, Unauthorized

__all__ = [
    "TOKEN_PREFIX",
    "Principal",
    "Role",
    "TokenCache",
    "authenticate",
    "bearer_hash",
    "bootstrap_admin",
    "hash_token",
    "lookup_principal",
    "new_token",
    "new_token_id",
    "require_admin",
    "require_writer",
    "visible",
]

TOKEN_PREFIX = "shn_"
DEFAULT_TEAM = "default"


class Role(enum.StrEnum):
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


@dataclass(frozen=True, kw_only=True)
class Principal:
    token_id: str
    team: str
    role: Role
    name: str

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN

    @property
    def can_write(self) -> bool:
        return self.role in (Role.ADMIN, Role.MEMBER)

    def sees_team(self, team: str) -> bool:
        return self.is_admin or team == self.team


class _TeamRow(Protocol):
    @property
    def team(self) -> str: ...


_Row = TypeVar("_Row", bound=_TeamRow)


def visible(principal: Principal, row: _Row | None, what: str) -> _Row:
    """``row`` when it exists and ``principal`` sees its team (its own; an admin, any); else
    ``NotFound("<what> not found")``: another team's row is as absent as a missing one."""
    if row is None or not principal.sees_team(row.team):
        raise NotFound(f"{what} not found")
    return row


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_token_id() -> str:
    return "tok-" + secrets.token_hex(8)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


class TokenCache:
    """token hash -> (Principal, expiry on the monotonic clock). Thread-safe."""

    def __init__(self, ttl_seconds: float) -> None:
        self.ttl = ttl_seconds
        self._lock = threading.Lock()
        self._items: dict[str, tuple[Principal, float]] = {}

    def get(self, token_hash: str) -> Principal | None:
        item = self._items.get(token_hash)
        if item is None or item[1] < time.monotonic():
            return None
        return item[0]

    def put(self, token_hash: str, principal: Principal) -> None:
        if self.ttl <= 0:
            return
        with self._lock:
            if len(self._items) > 10_000:
                self._items.clear()
            self._items[token_hash] = (principal, time.monotonic() + self.ttl)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


def _lookup(session: Session, token_hash: str) -> Principal | None:
    row = session.execute(
        select(Token).where(Token.token_hash == token_hash, Token.revoked_at.is_(None))
    ).scalar_one_or_none()
    if row is None:
        return None
    return Principal(token_id=row.id, team=row.team, role=Role(row.role), name=row.name)


def bearer_hash(authorization: str | None) -> str:
    """The SHA-256 of the ``Authorization: Bearer shn_...`` token; ``Unauthorized`` if none."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token.startswith(TOKEN_PREFIX):
        raise Unauthorized("missing or malformed token: send 'Authorization: Bearer shn_...'")
    return hash_token(token)


def lookup_principal(db: Database, cache: TokenCache, token_hash: str) -> Principal:
    """Resolve a token hash through the database (and remember it); ``Unauthorized``."""
    principal = db.read(lambda s: _lookup(s, token_hash))
    if principal is None:
        raise Unauthorized("invalid or revoked token")
    cache.put(token_hash, principal)
    return principal


def authenticate(db: Database, cache: TokenCache, authorization: str | None) -> Principal:
    """Resolve an ``Authorization: Bearer <token>`` header; raise ``Unauthorized``."""
    token_hash = bearer_hash(authorization)
    return cache.get(token_hash) or lookup_principal(db, cache, token_hash)


def require_writer(principal: Principal) -> Principal:
    if not principal.can_write:
        raise Forbidden(f"role {principal.role} may only read; this needs member or admin")
    return principal


def require_admin(principal: Principal) -> Principal:
    if not principal.is_admin:
        raise Forbidden(f"role {principal.role} may not do this; it needs admin")
    return principal


def bootstrap_admin(db: Database, *, token_path: Path, given: str = "") -> str | None:
    """First start: create team ``default`` and, if no admin token exists, one admin token.

    ``given`` (``SHUNTER_ADMIN_TOKEN``, e.g. from a Kubernetes Secret) is used as that token's
    plaintext instead of a new random one. The plaintext is written to ``token_path`` with mode
    0600 and returned; ``None`` when an admin token already existed (the file is then left as
    it is).
    """

    def _seed(session: Session) -> str | None:
        if session.get(Team, DEFAULT_TEAM) is None:
            session.add(Team(name=DEFAULT_TEAM, weight=1.0, max_priority="high"))  # the admin team
            session.flush()
        has_admin = session.execute(
            select(Token.id).where(Token.role == Role.ADMIN.value, Token.revoked_at.is_(None))
        ).first()
        if has_admin is not None:
            return None
        plaintext = given or new_token()
        session.add(
            Token(
                id=new_token_id(),
                token_hash=hash_token(plaintext),
                team=DEFAULT_TEAM,
                role=Role.ADMIN.value,
                name="bootstrap-admin",
                created_at=utcnow_py(),
            )
        )
        return plaintext

    plaintext = db.write(_seed)
    if plaintext is not None:
        token_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(plaintext + "\n")
        os.chmod(token_path, 0o600)  # O_CREAT's mode does not apply to an existing file
    return plaintext
