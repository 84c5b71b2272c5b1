"""The service's exception tree. Domain code raises these;
``service.http.error_mapping`` maps them to HTTP in one handler. Nothing here imports FastAPI.

    ServiceError                 (500 if it ever escapes unmapped)
     ├── ExportFailed            500  a step checkpoint could not be consolidated into a model
     ├── BadRequest              400  malformed input (bad cursor, bad JSON body)
     ├── Unauthorized            401  no/invalid token
     ├── Forbidden               403  role may not do this
     ├── NotFound                404  absent, or another team's
     ├── Conflict                409
     │    ├── IllegalTransition  a state move the table forbids, or a lost race
     │    └── StaleAttempt       an internal write from an attempt that is not current
     ├── PayloadTooLarge         413
     ├── UnsupportedMediaType    415
     ├── Unprocessable           422  the body is well-formed but invalid (names the field)
     └── Unavailable             503  a dependency (the cluster's Ray) cannot be reached
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequest",
    "Conflict",
    "ExportFailed",
    "Forbidden",
    "IllegalTransition",
    "NotFound",
    "PayloadTooLarge",
    "ServiceError",
    "StaleAttempt",
    "Unauthorized",
    "Unavailable",
    "Unprocessable",
    "UnsupportedMediaType",
]


class ServiceError(Exception):
    """Base: ``message`` is for humans; ``detail`` is machine-readable (a code or a list).

    A subclass names its HTTP status and code in its bases, e.g.
    ``class NotFound(ServiceError, status=404, code="not_found")``; one it leaves out is its
    parent's."""

    status_code = 500
    code = "internal_error"

    def __init_subclass__(
        cls, *, status: int | None = None, code: str | None = None, **kw: Any
    ) -> None:
        super().__init_subclass__(**kw)
        if status is not None:
            cls.status_code = status
        if code is not None:
            cls.code = code

    def __init__(self, message: str, *, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail if detail is not None else self.code


class BadRequest(ServiceError, status=400, code="bad_request"): ...


class Unauthorized(ServiceError, status=401, code="unauthorized"): ...


class Forbidden(ServiceError, status=403, code="forbidden"): ...


class NotFound(ServiceError, status=404, code="not_found"): ...


class ExportFailed(ServiceError, code="export_failed"): ...


class Conflict(ServiceError, status=409, code="conflict"): ...


class IllegalTransition(Conflict, code="illegal_transition"): ...


class StaleAttempt(Conflict, code="stale_attempt"): ...


class PayloadTooLarge(ServiceError, status=413, code="payload_too_large"): ...


class Unprocessable(ServiceError, status=422, code="unprocessable"): ...


class UnsupportedMediaType(ServiceError, status=415, code="unsupported_media_type"): ...


class Unavailable(ServiceError, status=503, code="unavailable"): ...
