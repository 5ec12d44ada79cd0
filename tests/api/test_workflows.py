"""The workflow endpoints: registration errors name the node, versions and
release, runs submitted as tasks, and tenants kept apart."""
from __future__ import annotations

from typing import Any

import pytest

from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tests.helpers import drive
from workflows_app.models import Workflow, WorkflowVersion

pytestmark = pytest.mark.django_db

FLOW_YAML = """
inputs:
  type: object
  required: [order_id]
  properties: {order_id: {type: string}}
nodes:
  - id: lookup
    tool: lookup_order
    args: {order_id: "${inputs.order_id}"}
  - id: tell
    after: [lookup]
    when: "nodes.lookup.amount_cents > 2000"
    human: {question: "Refund ${nodes.lookup.amount_cents}?"}
output: "${nodes.lookup}"
"""


def _register(client: Any, definition: Any, name: str = "refund_flow") -> Any:
    return client.post("/api/v1/workflows", {"name": name, "definition": definition},
                       format="json")


@pytest.mark.django_db(transaction=True)  # the runner's tools read from other threads
def test_a_yaml_definition_registers_as_version_1_and_runs_as_a_task(main):
    admin = main.client("admin")
    created = _register(admin, FLOW_YAML)
    assert created.status_code == 201, created.json()
    assert created.json()["current_version"] == 1
    assert created.json()["definition"]["nodes"][0]["id"] == "lookup"
    submitted = main.client("requester").post(
        "/api/v1/tasks", {"workflow": "refund_flow", "input": {"order_id": "A-2"}},
        format="json")
    assert submitted.status_code == 201, submitted.json()
    task = drive(submitted.json()["id"])
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    detail = main.client("operator").get(f"/api/v1/tasks/{task.pk}").json()
    assert detail["workflow"] == "refund_flow" and detail["workflow_version"] == 1
    assert detail["agent"] is None
    assert [(n["id"], n["status"]) for n in detail["nodes"]] == [
        ("lookup", "succeeded"), ("tell", "skipped")]  # 1200 cents: not above 2000
    assert detail["result"]["order_id"] == "A-2"


@pytest.mark.parametrize(("definition", "field"), [
    ({"nodes": [{"id": "a", "tool": "no_such_tool"}]}, "definition.nodes[0].tool"),
    ({"nodes": [{"id": "a", "tool": "lookup_order", "after": ["zz"]}]},
     "definition.nodes[0].after"),
    ({"nodes": [{"id": "a", "tool": "lookup_order", "after": ["b"]},
                {"id": "b", "tool": "lookup_order", "after": ["a"]}]},
     "definition.nodes[0].after"),
    ({"nodes": [{"id": "a", "tool": "lookup_order", "when": "inputs.x >"}]},
     "definition.nodes[0].when"),
    ({"nodes": [{"id": "a", "tool": "lookup_order"},
                {"id": "b", "tool": "lookup_order", "args": {"x": "${nodes.a.y}"}}]},
     "definition.nodes[1].args.x"),
    ({"nodes": [{"id": "a", "map": {"over": "inputs.list", "tool": "lookup_order"}},
                {"id": "a", "tool": "lookup_order"}]}, "definition.nodes[1].id"),
    ({"nodes": [{"id": f"n{i}", "tool": "lookup_order"} for i in range(201)]},
     "definition.nodes"),
    ({"nodes": [{"id": "a", "tool": "lookup_order", "when": "[1].map(x, [2].map(y, y)) == []"}]},
     "definition.nodes[0].when"),
    ({"nodes": [{"id": "a", "tool": "lookup_order",
                 "when": "(" * 40 + "true" + ")" * 40}]}, "definition.nodes[0].when"),
    ({"nodes": [{"id": "a", "tool": "lookup_order", "when": "nodes[inputs.k] == 1"}]},
     "definition.nodes[0].when"),
    ("nodes: [unclosed", "definition"),
    ({"nodes": [{"id": "a", "agent": {"name": "nobody", "goal": "g"}}]},
     "definition.nodes[0].agent.name"),
    ({"nodes": [{"id": "a", "tool": "lookup_order"},
                {"id": "b", "agent": {"name": "support", "goal": "about ${nodes.a.x}"}}]},
     "definition.nodes[1].agent.goal"),
    ({"nodes": [{"id": "a", "agent": {"name": "support", "goal": "g", "tools": []}}]},
     "definition.nodes[0].agent.tools"),
])
def test_a_bad_definition_is_a_400_naming_the_node_and_writes_nothing(main, definition, field):
    response = _register(main.client("admin"), definition)
    assert response.status_code == 400, response.json()
    assert field in response.json()["error"]["details"], response.json()
    assert not Workflow.objects.exists()


def test_a_new_definition_is_a_version_that_runs_get_once_promoted(main):
    admin = main.client("admin")
    assert _register(admin, FLOW_YAML).status_code == 201
    changed = FLOW_YAML.replace("when: \"nodes.lookup.amount_cents > 2000\"",
                                "when: \"nodes.lookup.amount_cents > 10\"")
    patched = admin.patch("/api/v1/workflows/refund_flow", {"definition": changed}, format="json")
    assert patched.status_code == 200 and patched.json()["latest_version"] == 2
    assert patched.json()["current_version"] == 1
    versions = admin.get("/api/v1/workflows/refund_flow/versions").json()
    assert [v["number"] for v in versions] == [2, 1]
    assert any(d["path"].startswith("nodes") for d in versions[0]["diff"])
    old = main.client("requester").post(
        "/api/v1/tasks", {"workflow": "refund_flow", "input": {"order_id": "A-1"}},
        format="json").json()
    promoted = admin.patch("/api/v1/workflows/refund_flow", {"promote": 2}, format="json")
    assert promoted.json()["current_version"] == 2
    new = main.client("requester").post(
        "/api/v1/tasks", {"workflow": "refund_flow", "input": {"order_id": "A-1"}},
        format="json").json()
    assert Task.objects.get(pk=old["id"]).agent_snapshot["workflow"]["version"] == 1
    assert Task.objects.get(pk=new["id"]).agent_snapshot["workflow"]["version"] == 2
    bad = admin.patch("/api/v1/workflows/refund_flow", {"promote": 9}, format="json")
    assert bad.status_code == 400 and "version" in bad.json()["error"]["details"]


def test_release_sends_a_share_of_runs_to_the_candidate(main):
    admin = main.client("admin")
    _register(admin, FLOW_YAML)
    admin.patch("/api/v1/workflows/refund_flow",
                {"definition": FLOW_YAML.replace("> 2000", "> 1")}, format="json")
    released = admin.patch("/api/v1/workflows/refund_flow",
                           {"release": {"candidate": 2, "percent": 50}}, format="json")
    assert released.json()["release"] == {"candidate": 2, "percent": 50}
    versions = set()
    for i in range(24):
        response = main.client("requester").post(
            "/api/v1/tasks", {"workflow": "refund_flow", "input": {"order_id": "A-1"}},
            format="json", HTTP_IDEMPOTENCY_KEY=f"k-{i}")
        versions.add(Task.objects.get(pk=response.json()["id"]).agent_snapshot["workflow"][
            "version"])
    assert versions == {1, 2}


def test_roles_and_tenants(main, other):
    assert _register(main.client("operator"), FLOW_YAML).status_code == 403
    assert _register(main.client("admin"), FLOW_YAML).status_code == 201
    assert other.client("admin").get("/api/v1/workflows/refund_flow").status_code == 404
    run = other.client("requester").post(
        "/api/v1/tasks", {"workflow": "refund_flow", "input": {"order_id": "A-1"}},
        format="json")
    assert run.status_code == 400 and "workflow" in run.json()["error"]["details"]
    assert main.client("requester").get("/api/v1/workflows").json()[0]["name"] == "refund_flow"


def test_submission_errors_are_400s(main):
    _register(main.client("admin"), FLOW_YAML)
    requester = main.client("requester")
    both = requester.post("/api/v1/tasks", {"workflow": "refund_flow", "agent": "support",
                                            "goal": "x"}, format="json")
    assert both.status_code == 400
    bad_input = requester.post("/api/v1/tasks", {"workflow": "refund_flow", "input": {}},
                               format="json")
    assert bad_input.status_code == 400 and "input" in bad_input.json()["error"]["details"]
    assert not Task.objects.exists()
    assert WorkflowVersion.objects.count() == 1
