"""The one DRF exception handler: every error in one shape,
``{"error": {"code", "message", "details"}}``; fsm's TransitionNotAllowed is a 409."""
from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404
from django_fsm import TransitionNotAllowed
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from .errors import HTTP_STATUS, DomainError


def _body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Map every error to the one error shape; unknown exceptions stay 500s (bugs)."""
    if isinstance(exc, DomainError):
        return Response(_body(exc.code, exc.message, exc.details), status=HTTP_STATUS[exc.kind])
    if isinstance(exc, TransitionNotAllowed):
        return Response(_body("illegal_transition", str(exc)), status=status.HTTP_409_CONFLICT)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied()
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = _body("invalid", "The request is not valid.", exc.detail)
    elif isinstance(exc, exceptions.APIException):
        detail = exc.detail
        message = str(detail) if not isinstance(detail, dict | list) else exc.default_detail
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else exc.default_code
        extra = {"wait_s": getattr(exc, "wait", None)} if isinstance(exc, exceptions.Throttled) else {}
        response.data = _body(str(code), str(message), extra)
    return response
