"""Every API error is the JSON error shape, unexpected ones included: a bug in
a DRF view or in a plain view under `/api/` is a 500 `{"error": ...}` that is
logged with its traceback and says nothing about it in the body; a database
that cannot serve (the pool exhausted, too many connections) is a 503 with
`Retry-After`, in the API's shape there and as a plain page in the console."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client, override_settings

from .failing_urls import SECRET

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.api.failing_urls")]


@pytest.fixture
def client() -> Client:
    return Client(raise_request_exception=False)


def error_of(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    return error


@pytest.mark.parametrize("path", ["/api/v1/test/broken", "/api/v1/test/plain-broken"])
def test_a_bug_is_a_json_500_logged_with_its_traceback(
    client: Client, caplog: Any, path: str
) -> None:
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get(path)
    assert error_of(response, 500)["code"] == "internal_error"
    body = response.content.decode()
    assert "hunter2" not in body and "Traceback" not in body
    logged = [r for r in caplog.records if r.exc_info and SECRET in str(r.exc_info[1])]
    assert logged, "the exception is logged with its traceback"


@pytest.mark.parametrize("path", ["/api/v1/test/busy", "/api/test/plain-busy"])
def test_a_busy_database_is_a_json_503_with_retry_after(client: Client, path: str) -> None:
    response = client.get(path)
    assert error_of(response, 503)["code"] == "database_unavailable"
    assert int(response["Retry-After"]) > 0
    assert "too many clients" not in response.content.decode()


def test_a_busy_database_is_a_plain_503_page_in_the_console(client: Client) -> None:
    response = client.get("/console-test/busy")
    assert response.status_code == 503
    assert int(response["Retry-After"]) > 0
    assert response["Content-Type"].startswith("text/html")
    assert "Busy" in response.content.decode()


def test_a_console_bug_stays_an_html_500(client: Client) -> None:
    response = client.get("/console-test/broken")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert "hunter2" not in response.content.decode()


@pytest.mark.parametrize("path", ["/api/", "/api/v2/tasks", "/api/v1/no/such/thing"])
def test_paths_under_api_that_match_nothing_are_json_404s(client: Client, path: str) -> None:
    assert error_of(client.get(path), 404)["code"] == "not_found"


@override_settings(ALLOWED_HOSTS=["testserver"])
def test_a_bad_host_under_api_is_a_json_400(client: Client) -> None:
    error_of(client.get("/api/v1/tasks", HTTP_HOST="evil.example"), 400)
