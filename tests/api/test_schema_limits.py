"""Schemas an admin registers are bounded (`tools_app.schemas`): through the
API, a schema that would recurse forever, refer outside itself, grow too
large or deep, or hold a pattern a linear-time engine cannot run is a 400
with a field error and nothing is stored; a catastrophic-backtracking pattern
is accepted, since RE2 matches it in linear time."""

from __future__ import annotations

from typing import Any

import pytest

from accounts_app.models import Role
from approvals_app.models import Approval
from tasks_app.machine import TaskStatus
from tasks_app.models import AgentProfile, Event, Step, Task
from tools_app.models import Tool
from tools_app.schemas import MAX_EVALUATIONS

from .conftest import REFUND_ARGS, Tenancy

ADM = Role.ADMIN


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _fan_out(levels: int) -> dict[str, Any]:
    """Each level applies the next one twice, in place: 2**levels subschemas on one value."""
    defs = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(levels)}
    return {"type": "object", "$defs": {**defs, f"d{levels}": {}}, "$ref": "#/$defs/d0"}


HOSTILE = [
    pytest.param({"type": "object", "$ref": "#"}, "cycle", id="self-ref"),
    pytest.param({"type": "object", "allOf": [{"$ref": "#"}]}, "cycle", id="allOf-self"),
    pytest.param({"type": "object", "$ref": "#/$defs/a",
                  "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}},
                 "cycle", id="mutual-cycle"),
    pytest.param({"type": "object", "not": {"$ref": "#"}}, "cycle", id="not-self"),
    pytest.param({"type": "object", "$ref": "#/$defs/missing"}, "does not resolve",
                 id="unresolvable"),
    pytest.param({"type": "object", "$ref": "#nowhere"}, "does not resolve", id="no-anchor"),
    pytest.param({"type": "object", "$ref": "https://127.0.0.1:9/schema.json"}, "not local",
                 id="remote-ref"),
    pytest.param({"type": "object", "$ref": "https://json-schema.org/draft/2020-12/schema"},
                 "not local", id="metaschema-ref"),
    pytest.param({"type": "object", "$ref": "other.json"}, "not local", id="relative-ref"),
    pytest.param({"type": "object", "$defs": {"x": {"$id": "x.json", "$ref": "#"}}},
                 "$id", id="nested-id"),
    pytest.param({"type": "object", "$dynamicRef": "#meta"}, "$dynamicRef", id="dynamic-ref"),
    pytest.param(_nested(20), "deep", id="too-deep"),
    pytest.param({"type": "object", "description": "x" * 70_000}, "bytes", id="too-large"),
    pytest.param(_fan_out(12), "subschemas", id="fan-out"),
    pytest.param({"type": "object", "properties": {"s": {"type": "string", "pattern": r"(a)\1"}}},
                 "RE2", id="backreference"),
    pytest.param({"type": "object", "properties": {"s": {"type": "string",
                                                         "pattern": "(?=a)a"}}},
                 "RE2", id="lookahead"),
    pytest.param({"type": "object", "patternProperties": {"(?<!x)y": {}}}, "RE2",
                 id="lookbehind-key"),
    pytest.param({"type": "object", "patternProperties": {"^a": {}},
                  "unevaluatedProperties": False}, "unevaluatedProperties",
                 id="unevaluated-with-patterns"),
    # a map of property names is no schema: applied as one, its "allOf" would be a schema
    pytest.param({"type": "object", "$ref": "#/properties",
                  "properties": {"allOf": {"type": "string"}}}, "does not point at a subschema",
                 id="ref-into-a-map"),
    # every value of an enum is a comparison at every check
    pytest.param({"type": "object", "properties": {"s": {"enum": list(range(5_000))}}},
                 "5000 values; at most 1000 are allowed", id="huge-enum"),
    # jsonschema evaluates it outside its keyword checks, quadratic in the value
    pytest.param({"type": "object", "properties": {"l": {"unevaluatedItems": False}}},
                 "unevaluatedItems is not supported", id="unevaluated-items"),
]


@pytest.mark.parametrize(("schema", "says"), HOSTILE)
def test_a_hostile_args_schema_is_a_400_and_nothing_is_stored(
        main: Tenancy, schema: dict[str, Any], says: str) -> None:
    before = Tool.objects.get(tenant=main.tenant, name="lookup_order").args_schema
    response = main.client(ADM).patch(
        "/api/v1/tools/lookup_order", {"args_schema": schema}, format="json")

    assert response.status_code == 400, response.content
    problems = response.json()["error"]["details"]["args_schema"]
    assert any(says in p for p in problems), problems
    assert Tool.objects.get(tenant=main.tenant, name="lookup_order").args_schema == before


@pytest.mark.parametrize(("schema", "says"), [HOSTILE[0], HOSTILE[6], HOSTILE[14]])
def test_a_hostile_result_schema_is_refused_on_a_new_tool(
        main: Tenancy, schema: dict[str, Any], says: str) -> None:
    response = main.client(ADM).post("/api/v1/tools", {
        "name": "lookup_again", "kind": "python", "target": "tools_app.demo.tools.lookup_order",
        "args_schema": {"type": "object"}, "result_schema": schema}, format="json")

    assert response.status_code == 400, response.content
    assert any(says in p for p in response.json()["error"]["details"]["result_schema"])
    assert not Tool.objects.filter(tenant=main.tenant, name="lookup_again").exists()


@pytest.mark.parametrize(("schema", "says"), [HOSTILE[0], HOSTILE[2], HOSTILE[7], HOSTILE[14]])
def test_a_hostile_agent_result_schema_is_a_400(
        main: Tenancy, schema: dict[str, Any], says: str) -> None:
    response = main.client(ADM).patch(
        "/api/v1/agents/support", {"result_schema": schema}, format="json")

    assert response.status_code == 400, response.content
    assert any(says in p for p in response.json()["error"]["details"]["result_schema"])
    assert AgentProfile.objects.get(tenant=main.tenant, name="support").result_schema == {}


@pytest.mark.parametrize("schema", [
    # a cycle that takes a smaller part of the value at each turn is fine
    {"type": "object", "properties": {"child": {"$ref": "#"}}},
    {"type": "object", "$defs": {"list": {"type": "array", "items": {"$ref": "#/$defs/list"}}},
     "properties": {"nested": {"$ref": "#/$defs/list"}}},
    {"type": "object", "$defs": {"id": {"$anchor": "order-id", "type": "string"}},
     "properties": {"order_id": {"$ref": "#order-id"}}},
    {"$id": "https://schemas.example/lookup", "type": "object",
     "properties": {"order_id": {"$ref": "#/$defs/id"}}, "$defs": {"id": {"type": "string"}}},
], ids=["through-properties", "through-items", "anchor", "root-id"])
def test_schemas_that_refer_to_themselves_through_the_value_are_accepted(
        main: Tenancy, schema: dict[str, Any]) -> None:
    response = main.client(ADM).patch(
        "/api/v1/tools/lookup_order", {"args_schema": schema}, format="json")
    assert response.status_code == 200, response.content


def test_a_catastrophic_pattern_is_accepted_and_matched_in_linear_time(main: Tenancy) -> None:
    """`^(a+)+$` against many a's and a `!` backtracks for ages in Python's `re`
    (27 a's hold the GIL for seconds); RE2 answers at once, so this test ends."""
    schema = {"type": "object", "required": ["order_id"],
              "properties": {"order_id": {"type": "string", "pattern": "^(a+)+$"}},
              "patternProperties": {"^(b+)+$": {"type": "integer"}},
              "additionalProperties": False}
    response = main.client(ADM).patch(
        "/api/v1/tools/lookup_order", {"args_schema": schema}, format="json")
    assert response.status_code == 200, response.content

    hostile = "a" * 50_000 + "!"
    task = main.finished_task([
        {"tool": "lookup_order", "args": {"order_id": hostile, "b" * 5_000 + "!": 1}},
        {"final": {"ok": True}},
    ])

    assert task.status == TaskStatus.SUCCEEDED
    error = Event.objects.get(task=task, type="invalid_decision").payload["error"]
    assert error["type"] == "invalid_arguments"
    text = " ".join(error["errors"])
    assert "does not match '^(a+)+$'" in text
    assert "Additional properties are not allowed" in text  # the b...! key matched no pattern
    assert all(len(e) <= 300 for e in error["errors"])  # the value is not echoed whole


# --- values too costly to validate ------------------------------------------------------------

COSTLY = f"(root): validating this value took more than {MAX_EVALUATIONS} schema checks"
DISTINCT = [{"k": i} for i in range(30_000)]
# jsonschema compared unsortable items pairwise (30,000 took minutes); linear now, so
# the attack needs the check applied over and over, which the meter stops
REPEATED_UNIQUE = {"type": "array", "allOf": [{"uniqueItems": True}] * 10}


def test_arguments_too_costly_to_validate_are_a_final_invalid_decision(main: Tenancy) -> None:
    schema = {"type": "object", "properties": {"ids": REPEATED_UNIQUE}}
    response = main.client(ADM).patch(
        "/api/v1/tools/lookup_order", {"args_schema": schema}, format="json")
    assert response.status_code == 200, response.content

    task = main.finished_task([
        {"tool": "lookup_order", "args": {"ids": DISTINCT}},
        {"final": {"ok": True}},
    ])

    assert task.status == TaskStatus.SUCCEEDED
    (event,) = Event.objects.filter(task=task, type="invalid_decision")
    assert event.payload["error"]["type"] == "invalid_arguments"
    assert event.payload["error"]["errors"] == [COSTLY]
    # decided once: no unexpected error retried, no retry of the step
    assert task.fault_attempts == 0
    assert not Event.objects.filter(task=task, type="retryable_error").exists()
    assert Step.objects.filter(task=task).count() == 2


def test_edited_arguments_too_costly_to_validate_are_a_400(main: Tenancy) -> None:
    """A reviewer's edit is validated in the web request: bounded like any other."""
    schema = {"type": "object", "properties": {
        "order_id": {"type": "string"}, "amount_cents": {"type": "integer"},
        "reason": {"type": "string"}, "lines": REPEATED_UNIQUE}}
    response = main.client(ADM).patch(
        "/api/v1/tools/issue_refund", {"args_schema": schema}, format="json")
    assert response.status_code == 200, response.content
    task, approval = main.waiting_for_approval()

    response = main.client(Role.REVIEWER).post(
        f"/api/v1/approvals/{approval.pk}/approve",
        {"args": {**REFUND_ARGS, "lines": DISTINCT}}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["details"]["args"] == [COSTLY]
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    assert Task.objects.get(pk=task.pk).version == task.version
