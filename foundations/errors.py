"""One domain error type; `foundations.api_errors` maps it to HTTP.

Every refusal the services make is a `DomainError` with a machine-readable
`code`, a `kind` that decides the HTTP status, and a `retryable` flag. The API
renders all errors as ``{"error": {"code", "message", "details"}}``; console
views render the same errors as messages.

A database that cannot serve a request right now (the connection pool is
exhausted, PostgreSQL refuses more connections, a connection dropped, a
statement was cancelled or deadlocked) is not a bug of the request: it is
an UNAVAILABLE error (503 with `Retry-After`), see `database_unavailable`.
"""
from __future__ import annotations

from enum import StrEnum
from typing import Any

from django.db import InterfaceError, OperationalError


class ErrorKind(StrEnum):
    INVALID = "invalid"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    GONE = "gone"
    UNAVAILABLE = "unavailable"
    QUOTA_EXCEEDED = "quota_exceeded"  # a tenant's quota (its spend limit) refuses it for now


HTTP_STATUS = {
    ErrorKind.INVALID: 400,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.CONFLICT: 409,
    ErrorKind.GONE: 410,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.QUOTA_EXCEEDED: 429,
}


class DomainError(Exception):
    """A refusal by a service: nothing was changed."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        kind: ErrorKind = ErrorKind.INVALID,
        details: dict[str, Any] | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.kind = kind
        self.details = details or {}
        self.retryable = retryable

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


def conflict(code: str, message: str, **details: Any) -> DomainError:
    return DomainError(code, message, kind=ErrorKind.CONFLICT, details=details)


def not_found(what: str) -> DomainError:
    return DomainError("not_found", f"{what} not found.", kind=ErrorKind.NOT_FOUND)


def gone(code: str, message: str, **details: Any) -> DomainError:
    """What existed and was moved away for good (an archived task)."""
    return DomainError(code, message, kind=ErrorKind.GONE, details=details)


def forbidden(code: str, message: str) -> DomainError:
    return DomainError(code, message, kind=ErrorKind.FORBIDDEN)


def invalid(code: str, message: str, **details: Any) -> DomainError:
    return DomainError(code, message, kind=ErrorKind.INVALID, details=details)


# What a client is told to wait (the `Retry-After` header of every 503).
RETRY_AFTER_S = 2


def unavailable(code: str, message: str, **details: Any) -> DomainError:
    return DomainError(code, message, kind=ErrorKind.UNAVAILABLE, retryable=True,
                       details={"retry_after_s": RETRY_AFTER_S, **details})


def database_unavailable(exc: BaseException) -> DomainError | None:
    """`exc` as an UNAVAILABLE error when it says the database cannot serve now,
    else None. Django wraps the pool's `PoolTimeout` and every psycopg
    `OperationalError` (too many connections, the server shutting down or
    starting up, a lost connection, a cancelled statement, a deadlock) in its
    `OperationalError`; a connection already closed is an `InterfaceError`."""
    if isinstance(exc, OperationalError | InterfaceError):
        return unavailable("database_unavailable",
                           "The database is busy or unreachable; retry shortly.")
    return None
