"""The client cannot drift from the server: its models are what the server's
OpenAPI schema generates today, and every request it sends (method, path,
query parameters, body fields, headers) is one the schema documents."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiJsonRenderer
from tether_client import _operations as ops
from tether_client import models
from tether_client._codegen import generate
from tether_client._operations import Operation

REGENERATE = ("python manage.py spectacular --format openapi-json --file schema.json && "
              "python -m tether_client._codegen schema.json > "
              "clients/python/tether_client/models.py")


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    raw = SchemaGenerator().get_schema(request=None, public=True)
    return json.loads(OpenApiJsonRenderer().render(raw))  # as the server serves it


def test_the_committed_models_are_what_the_schema_generates(schema: dict[str, Any]) -> None:
    committed = Path(models.__file__).read_text(encoding="utf-8")
    assert generate(schema) == committed, f"the models are stale; regenerate: {REGENERATE}"


def _every_operation() -> list[Operation[Any]]:
    return [
        ops.submit(agent="a", goal="g", input={"k": 1}, workflow=None, subject="s",
                   script=[{"final": 1}], idempotency_key="k"),
        ops.submit(agent=None, goal="", input=None, workflow="w", subject=None, script=None,
                   idempotency_key=None),
        ops.task(1), ops.tasks(status=["FAILED"], agent="a", mine=True, limit=5, cursor="c"),
        ops.cancel(1, reason="r", expected_version=2),
        ops.retry(1, from_step=2, from_node="n", comment="c", budget={"max_steps": 1}),
        ops.answer(1, "yes", expected_version=3), ops.events(1, after=2, limit=3),
        ops.steps(1, after=2, limit=3),
        ops.approvals(status="pending", task_id=1, limit=2, cursor="c"), ops.approval(1),
        ops.approve(1, comment="c", args={"a": 1}, always_allow=True, expected_version=1),
        ops.reject(1, comment="c", expected_version=1),
        ops.questions(status="open", task_id=1, limit=2, cursor="c"), ops.inbox(limit=3),
        *(op for named in (ops.TOOLS, ops.AGENTS) for op in (
            named.all(), named.one("x"), named.create("x", {"description": "d"}),
            named.update("x", {"description": "d"}))),
    ]


def _operation_in(schema: dict[str, Any], op: Operation[Any]) -> dict[str, Any]:
    for template, item in schema["paths"].items():
        pattern = re.sub(r"\\{[^}]+\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, ops.API_PREFIX + op.path) and op.method.lower() in item:
            return item[op.method.lower()]
    raise AssertionError(f"{op.method} {op.path} is not in the schema")


def _body_fields(schema: dict[str, Any], operation: dict[str, Any]) -> set[str]:
    ref = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    return set(schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"])


def test_every_request_the_client_sends_is_in_the_schema(schema: dict[str, Any]) -> None:
    for op in _every_operation():
        operation = _operation_in(schema, op)
        declared = {(p["in"], p["name"]) for p in operation.get("parameters", ())}
        args = op.request_args()
        assert {("query", name) for name in args["params"]} <= declared, op
        assert {("header", name) for name in op.headers} <= declared, op
        if op.json is not None:
            assert set(op.json) <= _body_fields(schema, operation), op
