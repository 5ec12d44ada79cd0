"""The one DRF exception handler: every error in one shape,
``{"error": {"code", "message", "details"}}``.

Kinds map to statuses (`foundations.errors.HTTP_STATUS`); fsm's TransitionNotAllowed
and database integrity races are 409s; a body over the configured size is a
413; a database that cannot serve now is a 503 with `Retry-After`. The same
shape is documented in the OpenAPI schema (`ErrorSerializer`,
`error_responses`), used by the catch-all 404 of `/api/v1/` and by the
server-wide error handlers (`config.error_pages`).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, RequestDataTooBig
from django.db import DataError, IntegrityError
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django_fsm import TransitionNotAllowed
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler, set_rollback

from .errors import HTTP_STATUS, RETRY_AFTER_S, DomainError, ErrorKind, database_unavailable

log = logging.getLogger(__name__)


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def too_large_body() -> dict[str, Any]:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return error_body(
        "request_too_large", f"The request body exceeds {limit} bytes.", {"max_bytes": limit}
    )


def domain_error_response(exc: DomainError) -> Response:
    response = Response(
        error_body(exc.code, exc.message, exc.details), status=HTTP_STATUS[exc.kind]
    )
    if exc.kind in (ErrorKind.UNAVAILABLE, ErrorKind.QUOTA_EXCEEDED):
        response["Retry-After"] = str(exc.details.get("retry_after_s", RETRY_AFTER_S))
    return response


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map every error to the one error shape. Unknown exceptions (bugs) are
    left to Django, whose `handler500` (`config.error_pages`) answers them
    in the same shape and logs them with their traceback."""
    busy = database_unavailable(exc)
    if busy is not None:
        log.warning("database unavailable, answering 503: %r", exc, exc_info=exc)
        exc = busy
    if isinstance(exc, DomainError):
        set_rollback()
        return domain_error_response(exc)
    if isinstance(exc, TransitionNotAllowed):
        set_rollback()
        return Response(error_body("illegal_transition", str(exc)), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, RequestDataTooBig):
        set_rollback()
        return Response(too_large_body(), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    if isinstance(exc, IntegrityError):
        # Two writers raced on a unique constraint (e.g. the same tool name): the loser gets a 409.
        set_rollback()
        log.warning("integrity error mapped to 409: %s", exc)
        return Response(
            error_body("conflict", "Another request changed this resource first; retry."),
            status=status.HTTP_409_CONFLICT,
        )
    if isinstance(exc, DataError):
        # Last line of defence: a value the database cannot store that validation let through.
        set_rollback()
        log.warning("data error mapped to 400: %s", exc)
        return Response(
            error_body("invalid", "A value is out of range or not storable."),
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, Http404 | ObjectDoesNotExist):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        detail = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        response.data = error_body("invalid", "The request is not valid.", detail)
    elif isinstance(exc, exceptions.APIException):
        raw = exc.detail
        message = str(raw) if not isinstance(raw, dict | list) else exc.default_detail
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else exc.default_code
        extra = (
            {"wait_s": getattr(exc, "wait", None)} if isinstance(exc, exceptions.Throttled) else {}
        )
        response.data = error_body(str(code), str(message), extra)
    return response


@csrf_exempt  # a JSON 404 for any method; there is nothing to protect
def api_not_found(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
    """Catch-all for `/api/v1/` paths that match no route (and ids that are not ids)."""
    return JsonResponse(error_body("not_found", "No such resource."), status=404)


# --- the error shape, for the OpenAPI schema ----------------------------------------


class ErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Machine-readable, e.g. `stale_version`, `invalid`.")
    message = serializers.CharField()
    details = serializers.DictField(
        child=serializers.JSONField(), help_text="Field errors ({field: [messages]}) or context."
    )


class ErrorSerializer(serializers.Serializer):
    error = ErrorDetailSerializer()


_ERROR_TEXT = {
    400: "Invalid request: `details` holds the field errors.",
    401: "Missing or invalid credentials.",
    403: "The caller's role may not do this.",
    404: "No such object in the caller's tenant.",
    405: "Method not allowed.",
    406: "Not acceptable.",
    409: "Illegal transition, stale `expected_version`, already decided, or key reuse.",
    410: "Gone: the object's data was archived, or its file expired.",
    413: "The request body is over the configured limit.",
    415: "Unsupported media type (send JSON).",
    429: "Throttled (too many requests for this token), or the tenant's spend limit is "
         "reached (`spend_limit_reached`): retry after `Retry-After` seconds.",
    503: "The database is busy or unreachable: retry after `Retry-After` seconds.",
}
COMMON_ERRORS = (400, 401, 403, 404, 405, 406, 413, 415, 429, 503)


def error_responses(*extra: int) -> dict[int, OpenApiResponse]:
    """Documented error responses: the common ones plus `extra` (e.g. 409)."""
    codes = sorted(set(COMMON_ERRORS) | set(extra))
    return {c: OpenApiResponse(ErrorSerializer, description=_ERROR_TEXT[c]) for c in codes}
