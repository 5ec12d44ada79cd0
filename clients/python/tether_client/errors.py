"""The API's errors as exceptions.

Every error Tether answers has one shape, `{"error": {"code", "message",
"details"}}`; a `TetherError` carries the three and the HTTP status, and its
class says the kind (one class per status the API documents). A 400's
`details` are the field errors: `{field: [messages]}`, also as `field_errors`.
"""

from __future__ import annotations

from typing import Any


class TetherError(Exception):
    """An error answer of the API (or a response that is not the API's)."""

    def __init__(self, status: int, code: str, message: str,
                 details: dict[str, Any] | None = None, *, retry_after: float | None = None
                 ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.retry_after = retry_after

    @property
    def field_errors(self) -> dict[str, Any]:
        """`{field: [messages]}` of a refused request ({} for other errors)."""
        return self.details if self.status == 400 else {}


class BadRequest(TetherError):
    """400: the request is not valid; `field_errors` says why, per field."""


class AuthenticationFailed(TetherError):
    """401: no API key, or a wrong or revoked one."""


class PermissionDenied(TetherError):
    """403: the key's role may not do this."""


class NotFound(TetherError):
    """404: no such object in the key's tenant."""


class Conflict(TetherError):
    """409: an illegal transition, a stale `expected_version`, already decided, key reuse."""


class Gone(TetherError):
    """410: the object was archived."""


class RateLimited(TetherError):
    """429: throttled or over a spend limit; retry after `retry_after` seconds."""


class ServiceUnavailable(TetherError):
    """503: the server is busy; retry after `retry_after` seconds."""


class ServerError(TetherError):
    """Any other 5xx."""


class StreamUnavailable(Exception):
    """The server has no event stream for tasks (an older server): poll instead."""


ERROR_CLASSES: dict[int, type[TetherError]] = {
    400: BadRequest, 401: AuthenticationFailed, 403: PermissionDenied, 404: NotFound,
    409: Conflict, 410: Gone, 429: RateLimited, 503: ServiceUnavailable,
}


def error_of(status: int, body: Any, headers: Any) -> TetherError:
    """The exception for an error response (BODY: its parsed JSON, or None)."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = {"code": f"http_{status}", "message": "The server's answer is not the API's."}
    retry = headers.get("Retry-After")
    cls = ERROR_CLASSES.get(status) or (ServerError if status >= 500 else TetherError)
    return cls(status, str(error.get("code") or f"http_{status}"), str(error.get("message", "")),
               error.get("details") if isinstance(error.get("details"), dict) else {},
               retry_after=float(retry) if retry and retry.replace(".", "", 1).isdigit() else None)
