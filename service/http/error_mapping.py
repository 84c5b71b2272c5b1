"""The one place errors become HTTP: ``{"detail": ..., "message": ...}`` for every 4xx/5xx;
on the OpenAI-compatible routes (``OPENAI_PREFIXES``) OpenAI's shape instead:
``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

import logging
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from service.db.engine import is_retryable, is_unavailable
from service.errors import ServiceError, Unauthorized
from storage import StorageUnavailable

__all__ = ["OPENAI_PREFIXES", "install_error_handlers"]

OPENAI_PREFIXES = ("/v1/files", "/v1/fine_tuning", "/v1/models")
_OPENAI_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    429: "rate_limit_error",
}

log = logging.getLogger(__name__)


def _body(detail: Any, message: str) -> dict[str, Any]:
    return {"detail": detail, "message": message}


def _reply(
    request: Request,
    detail: Any,
    message: str,
    status: int,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    if not request.url.path.startswith(OPENAI_PREFIXES):
        return JSONResponse(_body(detail, message), status, headers=headers)
    # OpenAI's error object: `param` names the offending field when we know it.
    first = detail[0] if isinstance(detail, list) and detail else None
    param = first.get("loc") if isinstance(first, dict) else None
    kind = "server_error" if status >= 500 else _OPENAI_TYPES.get(status, "invalid_request_error")
    code = detail if isinstance(detail, str) else None
    error = {"message": message, "type": kind, "param": param, "code": code}
    return JSONResponse({"error": error}, status, headers=headers)


def _loc(loc: Any) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "request"


async def _service_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ServiceError)
    headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
    return _reply(request, exc.detail, exc.message, exc.status_code, headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    detail = [{"loc": _loc(e.get("loc", ())), "msg": str(e.get("msg", ""))} for e in exc.errors()]
    message = f"{detail[0]['loc']}: {detail[0]['msg']}" if detail else "invalid request"
    return _reply(request, detail, message, 422)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = getattr(exc, "headers", None)
    return _reply(request, exc.detail, str(exc.detail), exc.status_code, headers)


async def _cluster_error(request: Request, exc: Exception) -> JSONResponse:
    """An HTTP call to the cluster (Ray's dashboard) that failed and no route handled: 503,
    never a 500 (admission itself never calls it: ``scheduler.cluster_view``)."""
    log.warning("cluster unreachable: %s: %s", type(exc).__name__, exc)
    message = f"the cluster (Ray) is unreachable: {type(exc).__name__}: {exc}"[:500]
    return _reply(request, "cluster_unreachable", message, 503, {"Retry-After": "5"})


# Seconds a client is told to wait while the database is away: PostgreSQL restarts in a few.
DB_RETRY_AFTER_S = 2


async def _db_error(request: Request, exc: Exception) -> JSONResponse:
    """Contention that outlasted every retry, or the database away (restart, failover,
    unreachable, a bounded wait ran out): 503 + ``Retry-After``, never a 500 and never a
    hang (``db.engine`` bounds every wait). Anything else from the database is a bug: 500."""
    assert isinstance(exc, DBAPIError | PoolTimeout)
    if is_retryable(exc):
        return _reply(
            request, "busy", "the database is busy; retry shortly", 503, {"Retry-After": "1"}
        )
    if is_unavailable(exc):
        log.warning("database unavailable: %s", str(exc).splitlines()[0][:300])
        message = "the database is unavailable (restarting or unreachable); retry shortly"
        return _reply(
            request, "database_unavailable", message, 503, {"Retry-After": str(DB_RETRY_AFTER_S)}
        )
    log.exception("database error", exc_info=exc)
    return _reply(request, "database_error", "database error", 500)


async def _storage_error(request: Request, exc: Exception) -> JSONResponse:
    """The object store stayed away past ``SHUNTER_STORAGE_RETRY_S`` (``storage.objects``):
    503 + ``Retry-After``, not a 500."""
    log.warning("object storage unavailable: %s", str(exc)[:300])
    message = "the object store is unavailable; retry shortly"
    return _reply(request, "storage_unavailable", message, 503, {"Retry-After": "30"})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DBAPIError, _db_error)
    app.add_exception_handler(PoolTimeout, _db_error)
    app.add_exception_handler(httpx.HTTPError, _cluster_error)
    app.add_exception_handler(StorageUnavailable, _storage_error)
