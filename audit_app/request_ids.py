"""The id of the HTTP request being served, for audit entries and log lines.

`RequestIdMiddleware` takes a client's `X-Request-Id` when it is a sane token
(1-64 of `[A-Za-z0-9._:-]`), else makes one, keeps it in a context variable
for the request's duration (bound into the log context too) and sends it back
in the response's `X-Request-Id`. Outside a request (a worker, a command) there
is none: `current_request_id()` is "".
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar

from django.http import HttpRequest, HttpResponse

from foundations.logs import log_scope

HEADER = "X-Request-Id"
_SANE = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_current: ContextVar[str] = ContextVar("tether_request_id", default="")


def current_request_id() -> str:
    return _current.get()


class RequestIdMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(HEADER, "")
        request_id = given if _SANE.fullmatch(given) else uuid.uuid4().hex
        token = _current.set(request_id)
        try:
            with log_scope(request_id=request_id):
                response = self.get_response(request)
        finally:
            _current.reset(token)
        response[HEADER] = request_id
        return response
