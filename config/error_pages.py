"""What the server answers when a request fails outside a view's own error
handling: Django's `handler400`, `handler403`, `handler404` and `handler500`.

- Under `/api/` the answer is always the API's JSON error shape
  (`foundations.api_errors.error_body`), never an HTML page, whatever failed: a
  middleware, a view outside DRF, or a bug (DRF leaves exceptions it does
  not know to Django, which lands here).
- A database that cannot serve now (`foundations.errors.database_unavailable`:
  the pool exhausted, too many connections, the server down) is a 503 with
  `Retry-After`, in the API and in the console alike; the console's page is
  plain HTML that needs no database to render.
- Any other exception is a 500. Django logs it with its traceback
  (`django.request`); the body says nothing about it.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string
from django.views import defaults

from foundations.api_errors import error_body
from foundations.errors import RETRY_AFTER_S, database_unavailable

from .middleware import API_PREFIX


def _api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _api(request):
        return JsonResponse(error_body("bad_request", "The request is malformed."), status=400)
    return defaults.bad_request(request, exception)


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _api(request):
        return JsonResponse(
            error_body("permission_denied", "You may not do this."), status=403
        )
    return defaults.permission_denied(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    if _api(request):
        return JsonResponse(error_body("not_found", "No such resource."), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django calls this while it handles the exception, so `sys.exc_info()`
    is the error being answered."""
    busy = database_unavailable(sys.exc_info()[1] or Exception())
    response: HttpResponse
    if busy is not None:
        if _api(request):
            response = JsonResponse(error_body(busy.code, busy.message, busy.details), status=503)
        else:
            response = HttpResponse(render_to_string("503.html"), status=503)
        response["Retry-After"] = str(RETRY_AFTER_S)
        return response
    if _api(request):
        return JsonResponse(
            error_body("internal_error", "An unexpected error occurred; it has been logged."),
            status=500,
        )
    return defaults.server_error(request)
