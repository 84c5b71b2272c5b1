"""Where the client finds the server and its token.

Order, first hit wins (DESIGN.md "Running it"; issue #5):

- URL: the argument, else ``SHUNTER_URL``, else ``http://127.0.0.1:8000`` (``shunter serve``'s
  default).
- token: the argument, else ``SHUNTER_TOKEN``, else the file ``$SHUNTER_HOME/admin.token``
  (``SHUNTER_HOME`` defaults to ``./.shunter``, where a local ``shunter serve`` writes it),
  else no token (the server will answer 401, which is the clearest message).

The admin token file is a local server's own credential: it is used only when the URL is a
loopback address (``127.0.0.0/8``, ``::1``, ``localhost``), never sent to another host unless
``SHUNTER_SEND_LOCAL_ADMIN_TOKEN=1`` says so. A token given explicitly (argument or
``SHUNTER_TOKEN``) goes to the configured URL only: the client never follows redirects.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["DEFAULT_URL", "is_loopback_url", "resolve_token", "resolve_url", "shunter_home"]

DEFAULT_URL = "http://127.0.0.1:8000"


def shunter_home(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    return Path(env.get("SHUNTER_HOME") or ".shunter")


def resolve_url(url: str | None = None, env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return (url or env.get("SHUNTER_URL") or DEFAULT_URL).rstrip("/")


def is_loopback_url(url: str) -> bool:
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_token(
    token: str | None = None, env: Mapping[str, str] | None = None, *, url: str | None = None
) -> str | None:
    """The token to send to ``url`` (``None`` = the resolved default URL); see the module doc."""
    env = os.environ if env is None else env
    if token:
        return token
    if env.get("SHUNTER_TOKEN"):
        return env["SHUNTER_TOKEN"]
    target = resolve_url(url, env)
    if not is_loopback_url(target) and env.get("SHUNTER_SEND_LOCAL_ADMIN_TOKEN") != "1":
        return None  # the local admin token never leaves this machine unasked
    path = shunter_home(env) / "admin.token"
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return text or None
