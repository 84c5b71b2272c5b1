"""Where the client finds the server and its token.

Order, first hit wins (DESIGN.md "Running it"; issue #5):

- URL: the argument, else ``SHUNTER_URL``, else ``http://127.0.0.1:8000`` (``shunter serve``'s
  default).
- token: the argument, else ``SHUNTER_TOKEN``, else the file ``$SHUNTER_HOME/admin.token``
  (``SHUNTER_HOME`` defaults to ``./.shunter``, where a local ``shunter serve`` writes it),
  else no token (the server will answer 401, which is the clearest message).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["DEFAULT_URL", "resolve_token", "resolve_url", "shunter_home"]

DEFAULT_URL = "http://127.0.0.1:8000"


def shunter_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("SHUNTER_HOME") or ".shunter")


def resolve_url(url: str | None = None, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return (url or env.get("SHUNTER_URL") or DEFAULT_URL).rstrip("/")


def resolve_token(token: str | None = None, env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    if token:
        return token
    if env.get("SHUNTER_TOKEN"):
        return env["SHUNTER_TOKEN"]
    path = shunter_home(env) / "admin.token"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None
