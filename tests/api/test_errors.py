"""One error shape for everything, and no input of any kind yields a 500:
413 for oversized bodies, 429 per token, 400 for bodies PostgreSQL could not
store, JSON 404s for unknown paths and ids; the schema and docs are served."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tasks_app.models import Task

from .conftest import Tenancy

REQ, ADM = Role.REQUESTER, Role.ADMIN


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    if code is not None:
        assert error["code"] == code
    return error


def test_a_body_over_the_limit_is_a_413(main: Tenancy, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    client = main.client(REQ)
    big = {"goal": "x" * 3000, "agent": "support", "script": [{"final": {}}]}
    error = assert_error(client.post("/api/v1/tasks", big, format="json"), 413, "request_too_large")
    assert error["details"]["max_bytes"] == 2000
    assert not Task.objects.exists()
    small = {"goal": "x" * 100, "agent": "support", "script": [{"final": {}}]}
    assert client.post("/api/v1/tasks", small, format="json").status_code == 201


def test_the_default_limit_is_a_mebibyte(main: Tenancy) -> None:
    body = {
        "goal": "g",
        "agent": "support",
        "script": [{"final": {}}],
        "input": {"blob": "x" * (1 << 20)},
    }
    assert_error(
        main.client(REQ).post("/api/v1/tasks", body, format="json"), 413, "request_too_large"
    )


def test_a_bad_content_length_is_a_400(main: Tenancy) -> None:
    response = main.client(REQ).generic(
        "POST", "/api/v1/tasks", b"{}", content_type="application/json", CONTENT_LENGTH="lots"
    )
    assert_error(response, 400)


def test_throttling_is_per_token_and_a_429(main: Tenancy, settings: Any) -> None:
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"user": "3/min"},
    }
    client = main.client(REQ)
    assert [client.get("/api/v1/tasks").status_code for _ in range(3)] == [200, 200, 200]
    response = client.get("/api/v1/tasks")
    error = assert_error(response, 429, "throttled")
    assert error["details"]["wait_s"] > 0
    assert int(response["Retry-After"]) > 0
    another_key = APIClient()
    another_key.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=main.requester)}")
    assert another_key.get("/api/v1/tasks").status_code == 200


@pytest.mark.parametrize(
    "raw",
    [
        b'{"goal": "a\\u0000b", "agent": "support", "script": []}',
        b'{"goal": "g", "agent": "support", "script": [], "input": {"k\\u0000": 1}}',
        b'{"goal": "g", "agent": "support", "script": [], "input": {"k": "\\ud800"}}',
        b'{"goal": "g", "agent": "support", "script": [], "input": {"k": NaN}}',
        b'{"goal": "g", "agent": "support", "script": [], "input": {"k": 1e999}}',
        b'{"goal": "g", "agent": "support", "script": [' + b"[" * 5000 + b"]" * 5000 + b"]}",
        b'{"goal": "g", "agent": "support", "script": [' + b"[" * 100 + b"]" * 100 + b"]}",
        b'{"goal": "g", "agent": "support", "script": [], "input": {"n": 1' + b"0" * 5000 + b"}}",
        b"{not json",
        b"\xff\xfe\x00",
        b"[1, 2, 3]",
        b"null",
        b'"just a string"',
    ],
)
def test_bodies_postgresql_cannot_store_are_a_400(main: Tenancy, raw: bytes) -> None:
    response = main.client(REQ).generic(
        "POST", "/api/v1/tasks", raw, content_type="application/json"
    )
    assert_error(response, 400)
    assert not Task.objects.exists()


def test_non_json_bodies_are_a_415(main: Tenancy) -> None:
    response = main.client(REQ).generic(
        "POST", "/api/v1/tasks", b"goal=g", content_type="text/plain"
    )
    assert_error(response, 415, "unsupported_media_type")


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/nothing-here",
        "/api/v1/tasks/",
        "/api/v1/tasks/abc",
        "/api/v1/tasks/99999999999999999999999999",
        "/api/v1/tasks/9223372036854775807",
        "/api/v1/approvals/123456789012345678",
        "/api/v1/tools/" + "x" * 65,
        "/api/v1/tools/%00",
    ],
)
def test_unknown_paths_and_ids_are_json_404s(main: Tenancy, url: str) -> None:
    assert_error(main.client(ADM).get(url), 404, "not_found")


def test_a_method_the_endpoint_lacks_is_a_405(main: Tenancy) -> None:
    assert_error(main.client(ADM).delete("/api/v1/tasks"), 405, "method_not_allowed")


@pytest.mark.parametrize(
    "query",
    [
        "created_after=0001-01-01T00:00:00%2B14:00",
        "created_before=9999-12-31T23:59:59-14:00",
        "trace_id=%00",
        "agent=a%00b",
        "cursor=cD05OTk5OTk5OTk5OTk5OTk5OTk5OTk5",
        "cursor=%F0%9F%92%A9",
        "limit=99999999999999999999",
    ],
)
def test_odd_query_values_never_500(main: Tenancy, query: str) -> None:
    response = main.client(ADM).get(f"/api/v1/tasks?{query}")
    assert response.status_code in (200, 400), response.content


def test_an_expected_version_out_of_range_is_a_400(main: Tenancy) -> None:
    task = main.created_task()
    response = main.client(ADM).post(
        f"/api/v1/tasks/{task.pk}/cancel", {"expected_version": 10**30}, format="json"
    )
    assert_error(response, 400)
    assert Task.objects.get(pk=task.pk).status == "CREATED"


def test_the_openapi_schema_and_docs_are_served(main: Tenancy) -> None:
    client = APIClient()
    schema = client.get("/api/v1/schema", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    body = schema.json()
    assert body["openapi"].startswith("3.")
    submit = body["paths"]["/api/v1/tasks"]["post"]
    assert submit["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "TaskSubmitRequest"
    )
    assert {"201", "200", "400", "401", "403", "409", "413", "429"} <= set(submit["responses"])
    assert body["components"]["schemas"]["Error"]["properties"]["error"]
    assert "tokenAuth" in body["components"]["securitySchemes"]
    docs = client.get("/api/v1/docs")
    assert docs.status_code == 200 and b"swagger-ui" in docs.content
    assert b"cdn.jsdelivr" not in docs.content  # served from our own static files
    assert client.get("/api/v1/redoc").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "/api/v1/tasks",
        "/api/v1/approvals",
        "/api/v1/tools",
        "/api/v1/agents/support",
        "/api/v1/tasks/999",
    ],
)
def test_the_browsable_api_renders_for_a_browser(main: Tenancy, url: str) -> None:
    client = APIClient()
    client.force_login(main.users[ADM])
    response = client.get(url, HTTP_ACCEPT="text/html")
    assert response.status_code in (200, 404)
    assert response["Content-Type"].startswith("text/html")
    assert b"Django REST framework" in response.content


def test_a_body_found_too_big_while_being_read_is_a_413_too(rf: Any) -> None:
    """Django raises RequestDataTooBig lazily, when a view reads the body."""
    from django.core.exceptions import RequestDataTooBig

    from config.middleware import ApiRequestSizeLimitMiddleware
    from foundations.api_errors import api_exception_handler

    response = api_exception_handler(RequestDataTooBig("too big"), {})
    assert response is not None and response.status_code == 413
    assert response.data["error"]["code"] == "request_too_large"
    middleware = ApiRequestSizeLimitMiddleware(lambda request: None)  # type: ignore[arg-type,return-value]
    handled = middleware.process_exception(rf.post("/api/v1/tasks"), RequestDataTooBig("too big"))
    assert handled is not None and handled.status_code == 413
    assert middleware.process_exception(rf.post("/tasks/"), RequestDataTooBig("too big")) is None
