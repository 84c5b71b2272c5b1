"""Exceptions the client raises, one per kind of API answer.

::

    ShunterError                 anything from this package
    ├── ConnectionFailed         the server could not be reached (refused, DNS, timeout)
    └── APIError                 the server answered with an error status
        ├── BadRequest           400/413/415: a body or parameter the API refuses to read
        ├── AuthError            401: no token, or an unknown / revoked one
        ├── PermissionDenied     403: the token's role may not do this
        ├── NotFound             404: no such job (or another team's: the API says 404 there too)
        ├── Conflict             409: e.g. cancelling a succeeded job
        ├── ValidationError      422: the spec or request is invalid; ``.detail`` lists the problems
        └── ServerError          5xx, or any other unexpected status

Every :class:`APIError` carries the HTTP ``status_code``, the API's human ``message`` and the
decoded ``body``. :func:`raise_for_response` is the one place statuses map to classes.
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = [
    "APIError",
    "AuthError",
    "BadRequest",
    "Conflict",
    "ConnectionFailed",
    "NotFound",
    "PermissionDenied",
    "ServerError",
    "ShunterError",
    "ValidationError",
    "error_message",
    "raise_for_response",
]


class ShunterError(Exception):
    """Base class of everything the client raises."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ConnectionFailed(ShunterError):
    """The server could not be reached."""


class APIError(ShunterError):
    """The server answered with an error status."""

    def __init__(self, message: str, *, status_code: int, body: Any = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body

    def __str__(self) -> str:
        return f"{self.status_code}: {self.message}"


class BadRequest(APIError):
    """400/413/415: e.g. a spec document with NaN or a NUL byte, or a cursor not from this API."""


class AuthError(APIError):
    """401: missing, unknown or revoked token."""


class PermissionDenied(APIError):
    """403: the token's role does not allow this action."""


class NotFound(APIError):
    """404: no such resource visible to this token."""


class Conflict(APIError):
    """409: the resource's state does not allow this action."""


class ValidationError(APIError):
    """422: the request is invalid. ``detail`` is the API's list of problems (may be empty)."""

    def __init__(self, message: str, *, status_code: int, body: Any = None) -> None:
        super().__init__(message, status_code=status_code, body=body)
        detail = body.get("detail") if isinstance(body, dict) else None
        self.detail: list[Any] = detail if isinstance(detail, list) else []


class ServerError(APIError):
    """5xx, or a status the client does not expect."""


_BY_STATUS: dict[int, type[APIError]] = {
    400: BadRequest,
    413: BadRequest,
    415: BadRequest,
    401: AuthError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: ValidationError,
}


def error_message(body: Any, fallback: str) -> str:
    """The human message inside an error body.

    Accepts the shapes FastAPI-style services send: ``{"message": ...}``,
    ``{"error": {"message": ...}}``, ``{"detail": "..."}`` and
    ``{"detail": [{"loc": [...], "msg": ...}, ...]}`` (joined one problem per line).
    """
    if isinstance(body, dict):
        for key in ("message",):
            if isinstance(body.get(key), str) and body[key]:
                return str(body[key])
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        detail = body.get("detail")
        if isinstance(detail, str) and detail:
            return detail
        if isinstance(detail, list) and detail:
            return "\n".join(_detail_line(d) for d in detail)
    if isinstance(body, str) and body.strip():
        return body.strip()
    return fallback


def _detail_line(item: Any) -> str:
    if not isinstance(item, dict):
        return str(item)
    msg = str(item.get("msg") or item.get("message") or item)
    loc = item.get("loc")
    if isinstance(loc, list | tuple) and loc:
        where = ".".join(str(p) for p in loc if p != "body")
        if where and not msg.startswith(where):
            return f"{where}: {msg}"
    return msg


def raise_for_response(response: httpx.Response) -> None:
    """Raise the matching :class:`APIError` when ``response`` is not a 2xx; else return."""
    if response.is_success:
        return
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    fallback = f"HTTP {response.status_code} {response.reason_phrase}".strip()
    message = error_message(body, fallback)
    cls = _BY_STATUS.get(response.status_code, ServerError)
    raise cls(message, status_code=response.status_code, body=body)
