"""The real URL map plus views that fail the way a bug or a busy database does,
for `test_unexpected_errors` (`override_settings(ROOT_URLCONF=...)`)."""

from __future__ import annotations

from django.db import OperationalError
from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config import urls as real
from config.urls import handler400, handler403, handler404, handler500  # noqa: F401

SECRET = "connection string postgres://admin:hunter2@db/prod"


class Broken(APIView):
    authentication_classes: list[type] = []
    permission_classes: list[type] = []

    def get(self, request: Request) -> Response:
        raise RuntimeError(SECRET)


class Busy(APIView):
    authentication_classes: list[type] = []
    permission_classes: list[type] = []

    def get(self, request: Request) -> Response:
        raise OperationalError("couldn't get a connection after 0.10 sec")


def plain_broken(request: HttpRequest) -> HttpResponse:
    raise KeyError(SECRET)


def plain_busy(request: HttpRequest) -> HttpResponse:
    raise OperationalError("sorry, too many clients already")


urlpatterns = [
    path("api/v1/test/broken", Broken.as_view()),
    path("api/v1/test/busy", Busy.as_view()),
    path("api/v1/test/plain-broken", plain_broken),
    path("api/test/plain-busy", plain_busy),
    path("console-test/busy", plain_busy),
    path("console-test/broken", plain_broken),
    *real.urlpatterns,
]
