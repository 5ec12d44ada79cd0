"""Hostile definitions and inputs are bounded: at registration a 400 naming
the problem and nothing written (never a 500, never a parse that runs away);
at run time the node fails at once with the limit it hit, the run fails
cleanly, and the task's page answers 200 with the failure."""
from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts_app.services.accounts import api_key_create
from foundations.expressions import MAX_LOOP_ITEMS, MAX_RESULT_BYTES
from tasks_app.machine import TaskStatus
from tests.fakes.runtime import add_tool
from tests.helpers import drive
from workflows_app.models import Workflow

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api(world):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "echo", "echo")

    def client(role: str) -> APIClient:
        c = APIClient()
        c.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users[role])}")
        return c

    return client


def _register(api: Any, definition: Any, name: str = "hostile") -> Any:
    return api("admin").post("/api/v1/workflows", {"name": name, "definition": definition},
                             format="json")


def _yaml_aliases(levels: int) -> str:
    """A definition whose args expand, alias by alias, into 10**levels strings
    (each level lists the one before ten times): a few hundred bytes of YAML."""
    lines = ["x0: &x0 '${inputs.x}'"]
    for i in range(1, levels + 1):
        lines.append(f"x{i}: &x{i} [" + ", ".join([f"*x{i - 1}"] * 10) + "]")
    return ("nodes:\n  - id: a\n    tool: echo\n    args:\n"
            + "".join(f"      {line}\n" for line in lines) + f"      all: *x{levels}\n")


@pytest.mark.parametrize(("definition", "problem"), [
    ("nodes: [{id: a, tool: echo, args: " + "[" * 5000 + "]" * 5000 + "}]", "nested"),
    (_yaml_aliases(9), "alias"),  # a billion strings once expanded
    ('nodes: [{id: a, tool: echo, args: {x: "a\\0b"}}]', "NUL"),
    ("nodes: [{id: a, tool: echo, args: {when: 2026-12-07}}]", "date"),
    ("nodes: [{id: a, tool: echo, args: {x: .nan}}]", "finite"),
    ("nodes: [{id: a, tool: echo, args: {1: x}}]", "keys are strings"),
])
def test_a_hostile_yaml_definition_is_a_400_naming_it_and_writes_nothing(api, definition,
                                                                       problem):
    response = _register(api, definition)
    assert response.status_code == 400, response.content[:500]
    details = response.json()["error"]["details"]
    assert problem in details["definition"][0], details
    assert not Workflow.objects.exists()


def test_a_json_definition_nested_past_the_parser_bound_is_a_400(api):
    deep: Any = "${inputs.x}"
    for _ in range(100):
        deep = [deep]
    response = _register(api, {"nodes": [{"id": "a", "tool": "echo", "args": {"x": deep}}]})
    assert response.status_code == 400, response.content[:500]
    assert not Workflow.objects.exists()


FAN = {"nodes": [{"id": "fan", "map": {"over": "inputs.xs", "tool": "echo",
                                       "args": {"i": "${item}"}}}]}


def _run(api: Any, definition: dict[str, Any], input: dict[str, Any]) -> dict[str, Any]:
    """Register, submit through the API, drive the run in-process; the run's
    page as the API answers it."""
    assert _register(api, definition).status_code == 201
    submitted = api("requester").post("/api/v1/tasks", {"workflow": "hostile", "input": input},
                                      format="json")
    assert submitted.status_code == 201, submitted.content[:500]
    task = drive(submitted.json()["id"])
    assert task.status == TaskStatus.FAILED, (task.status, task.failure_detail)
    assert task.failure_reason == "workflow_failed"
    page = api("operator").get(f"/api/v1/tasks/{task.pk}")
    assert page.status_code == 200, page.content[:500]
    body: dict[str, Any] = page.json()
    assert not [s for s in task.steps.all() if s.tool], "no tool was called"
    return body


def _node(page: dict[str, Any], node_id: str) -> dict[str, Any]:
    return next(n for n in page["nodes"] if n["id"] == node_id)


def test_a_map_over_100000_items_fails_its_node_without_a_step_per_item(api):
    page = _run(api, FAN, {"xs": [0] * 100_000})
    fan = _node(page, "fan")
    assert fan["status"] == "failed" and fan["steps"] == []
    assert fan["error"]["type"] == "expression_failed"
    # 100,000 items are over the size a value may have (before the item count)
    assert f"more than {MAX_RESULT_BYTES}" in fan["error"]["message"], fan["error"]


def test_a_map_over_more_items_than_the_limit_names_the_limit(api):
    page = _run(api, FAN, {"xs": [0] * 5000})
    fan = _node(page, "fan")
    assert fan["status"] == "failed" and fan["steps"] == []
    assert "gave 5000 items; at most 1000" in fan["error"]["message"], fan["error"]


def test_an_expression_whose_value_is_over_the_size_limit_fails_its_node(api):
    definition = {"nodes": [{"id": "a", "tool": "echo",
                             "args": {"x": "${inputs.s + inputs.s + inputs.s}"}}]}
    page = _run(api, definition, {"s": "x" * 100_000})
    error = _node(page, "a")["error"]
    assert f"more than {MAX_RESULT_BYTES}" in error["message"], error
    assert "node 'a' failed" in str(page["failure_detail"]), page["failure_detail"]


@pytest.mark.parametrize(("expression", "problem"), [
    ("b'abc'", "type bytes"),
    ("timestamp('2026-01-01T00:00:00Z')", "type datetime"),
    ("duration('1s')", "type timedelta"),
    ("0.0 / 0.0", "not finite"),
    ("'a\\x00b'", "NUL"),
    ("{1: 2}", "not a string"),
])
def test_a_value_that_is_not_json_fails_its_node_before_any_call(api, expression, problem):
    definition = {"nodes": [{"id": "a", "map": {"over": f"[{expression}]", "tool": "echo",
                                                "args": {"x": "${item}"}}}]}
    error = _node(_run(api, definition, {}), "a")["error"]
    assert error["type"] == "expression_failed" and problem in error["message"], error


@pytest.mark.parametrize("condition", [
    "inputs.xs.map(x, x + 1).size() > 0",  # the library's macros: quadratic in the length
    "inputs.xs.filter(x, x == 0).size() > 0",
    "size(" + " + ".join(["inputs.xs"] * 150) + ") > 0",  # 150 copies, one `+` at a time
])
def test_an_expression_that_loops_over_a_huge_list_fails_at_once(api, condition):
    definition = {"nodes": [{"id": "a", "tool": "echo", "when": condition}]}
    page = _run(api, definition, {"xs": [0] * 50_000})
    error = _node(page, "a")["error"]
    assert "inputs.xs has 50000 items" in error["message"], error
    assert f"at most {MAX_LOOP_ITEMS} items" in error["message"], error


def test_deep_input_is_refused_at_submission(api):
    assert _register(api, FAN).status_code == 201
    deep: Any = 1
    for _ in range(200):
        deep = {"a": deep}
    response = api("requester").post("/api/v1/tasks", {"workflow": "hostile",
                                                       "input": {"xs": [deep]}}, format="json")
    assert response.status_code == 400, response.content[:500]


def test_deep_input_within_the_parser_bound_runs_through_expressions(api):
    definition = {"nodes": [{"id": "a", "tool": "echo",
                             "when": "inputs.d" + ".a" * 55 + " == 1",
                             "args": {"d": "${inputs.d}"}}],
                  "output": "${nodes.a.echo.d" + ".a" * 55 + "}"}
    deep: Any = 1
    for _ in range(55):
        deep = {"a": deep}
    assert _register(api, definition).status_code == 201
    submitted = api("requester").post("/api/v1/tasks", {"workflow": "hostile",
                                                        "input": {"d": deep}}, format="json")
    assert submitted.status_code == 201, submitted.content[:500]
    task = drive(submitted.json()["id"])
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    assert task.result == 1
