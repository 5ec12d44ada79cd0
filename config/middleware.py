"""Request-size limit for the REST API: a body over `DATA_UPLOAD_MAX_MEMORY_SIZE`
(env `MAX_REQUEST_BYTES`) is a 413 in the API's error shape.

Django only raises `RequestDataTooBig` when something reads `request.body`,
and DRF's parsers read the raw stream without that check, so the limit is
enforced here from `Content-Length`, before any view runs. A `RequestDataTooBig`
raised later (a view reading `request.body`) is turned into the same 413.
Under ASGI a body is limited earlier still, chunked ones included, before
Django reads it (`config.body_limit`); this covers WSGI and the test client.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse

from foundations.api_errors import error_body, too_large_body

API_PREFIX = "/api/"


class ApiRequestSizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith(API_PREFIX):
            raw = request.META.get("CONTENT_LENGTH") or "0"
            try:
                length = int(raw)
            except ValueError:
                return JsonResponse(
                    error_body("invalid", "Content-Length is not a number."), status=400
                )
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            if limit is not None and length > limit:
                return JsonResponse(too_large_body(), status=413)
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, RequestDataTooBig) and request.path.startswith(API_PREFIX):
            return JsonResponse(too_large_body(), status=413)
        return None
