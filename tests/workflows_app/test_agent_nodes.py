"""A workflow's `agent` nodes: each runs as a child task of the run (an
ordinary task of its agent), and the node's output is the child's result."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from accounts_app.models import Role
from approvals_app.services.answers import task_provide_input
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.runner.loop import run_slice
from tests.fakes.fixtures import openai_agent, openai_server  # noqa: F401 - fixture
from tests.fakes.openai_server import reply
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive, slices_until_waiting
from workflows_app.definition import DefinitionError, load, parse_source
from workflows_app.orchestrator import run_nodes
from workflows_app.services.runs import submit_run
from workflows_app.services.workflows import workflow_create

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "sk-live-7f3a9c1e-DO-NOT-LEAK"


@pytest.fixture
def tenant(world):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "echo", "echo")
    return world.tenant


def _scripted(tenant, name: str, script: list[Any]):  # type: ignore[no-untyped-def]
    return add_agent(tenant, name, ["echo"], model={"backend": "scripted", "script": script})


def _start(tenant, definition: dict[str, Any], input: dict[str, Any] | None = None) -> Task:  # type: ignore[no-untyped-def]
    workflow_create(tenant_id=tenant.pk, name="flow", definition=definition, actor=SYSTEM)
    return submit_run(tenant_id=tenant.pk, requester_id=None, workflow="flow",
                      input=input or {}, actor=SYSTEM).task


def _run_with_children(run: Task) -> Task:
    """The run and every child it starts, each driven in turn, until the run stops."""
    for _ in range(20):
        run = slices_until_waiting(run.pk)
        if run.status != TaskStatus.RUNNING:
            return run
        for child in Task.objects.filter(parent=run, status__in=("CREATED", "RUNNING")):
            drive(child.pk)
    raise AssertionError("the run did not end")


def _nodes(task: Task) -> dict[str, dict[str, Any]]:
    return {n["id"]: n for n in run_nodes(task)}


def test_an_agent_node_runs_a_child_task_whose_result_is_the_nodes_output(tenant, world):
    _scripted(tenant, "triager", [{"tool": "echo", "args": {"look": 1}},
                                  {"final": {"priority": "high"}}])
    run = _start(tenant, {
        "inputs": {"type": "object", "properties": {"order": {"type": "string"}}},
        "nodes": [
            {"id": "triage", "agent": {"name": "triager", "goal": "Triage ${inputs.order}",
                                       "input": {"order": "${inputs.order}"}}},
            {"id": "after", "after": ["triage"], "tool": "echo",
             "args": {"p": "${nodes.triage.priority}"}},
        ],
        "output": {"priority": "${nodes.triage.priority}", "echoed": "${nodes.after.echo.p}"},
    }, {"order": "A-1"})
    assert run.agent_snapshot["tools"] == ["agent:triager", "echo"]
    run = _run_with_children(run)

    assert run.status == TaskStatus.SUCCEEDED, run.failure_detail
    assert run.result == {"priority": "high", "echoed": "high"}
    (child,) = Task.objects.filter(parent=run)
    assert (child.goal, child.input, child.depth, child.agent.name) == (
        "Triage A-1", {"order": "A-1"}, 1, "triager")
    nodes = _nodes(run)
    assert nodes["triage"]["status"] == "succeeded"
    assert nodes["triage"]["output"] == {"priority": "high"}
    assert (nodes["triage"]["task"], nodes["triage"]["tasks"]) == (child.pk, [child.pk])
    assert nodes["after"]["task"] is None
    browser = Client()
    browser.force_login(world.users[Role.OPERATOR])
    page = browser.get(f"/tasks/{run.pk}/").content.decode()
    assert f'<g class="dag-node dag-succeeded" data-node="triage" data-status="succeeded">' \
        f'<a href="/tasks/{child.pk}/">' in page  # the graph's box opens the child task


def test_a_node_whose_child_waits_for_a_person_is_waiting_and_holds_no_lease(tenant):
    _scripted(tenant, "asker", [{"ask": "Which size?"}, {"final": {"size": "L"}}])
    run = _start(tenant, {"nodes": [{"id": "ask", "agent": {"name": "asker", "goal": "size"}}]})
    run = slices_until_waiting(run.pk)
    (child,) = Task.objects.filter(parent=run)
    assert drive(child.pk).status == TaskStatus.WAITING_FOR_INPUT
    run_slice(run.pk)  # the run looks again: still waiting
    run = Task.objects.get(pk=run.pk)
    assert (run.status, run.lease_owner) == (TaskStatus.RUNNING, "")
    assert _nodes(run)["ask"]["status"] == "waiting"

    task_provide_input(task_id=child.pk, answer="L", actor=SYSTEM)
    run = _run_with_children(run)
    assert run.status == TaskStatus.SUCCEEDED
    assert run.result == {"ask": {"size": "L"}}


def test_a_failed_child_fails_its_node_after_its_retries(tenant):
    _scripted(tenant, "broken", [])  # its first model call fails: the child FAILED
    run = _start(tenant, {"nodes": [
        {"id": "try", "agent": {"name": "broken", "goal": "break"}, "retries": 1}]})
    run = _run_with_children(run)
    assert run.status == TaskStatus.FAILED
    assert run.failure_reason == "workflow_failed"
    node = _nodes(run)["try"]
    assert node["status"] == "failed" and len(node["tasks"]) == 2  # one child per try
    assert node["error"]["type"] == "child_failed"
    assert node["error"]["status"] == "FAILED"


def test_a_map_over_an_agent_starts_one_child_per_item(tenant):
    _scripted(tenant, "greeter", [{"final": {"greeted": True}}])
    run = _start(tenant, {"nodes": [{"id": "each", "map": {
        "over": "inputs.names",
        "agent": {"name": "greeter", "goal": "Greet ${item}", "input": {"who": "${item}",
                                                                        "n": "${index}"}}}}]},
        {"names": ["ada", "bob"]})
    run = _run_with_children(run)
    assert run.status == TaskStatus.SUCCEEDED, run.failure_detail
    assert run.result == {"each": [{"greeted": True}, {"greeted": True}]}
    kids = list(Task.objects.filter(parent=run).order_by("id"))
    assert [(k.goal, k.input) for k in kids] == [("Greet ada", {"who": "ada", "n": 0}),
                                                 ("Greet bob", {"who": "bob", "n": 1})]
    assert _nodes(run)["each"]["tasks"] == [k.pk for k in kids]


def test_a_child_agents_model_sees_its_input_and_none_of_the_runs_other_outputs(
        tenant, openai_server):  # noqa: F811 - fixture
    openai_agent(tenant, openai_server, name="writer", tools=[])
    openai_server.push(reply('{"summary": "order A-9 is fine"}'))
    run = _start(tenant, {"nodes": [
        {"id": "fetch", "tool": "echo", "args": {"token": SECRET, "order": "A-9"}},
        {"id": "write", "after": ["fetch"], "agent": {
            "name": "writer", "goal": "Summarise the order",
            "input": {"order": "${nodes.fetch.echo.order}"}}},
    ]})
    run = _run_with_children(run)
    assert run.status == TaskStatus.SUCCEEDED, run.failure_detail
    assert run.steps.get(step_no=1).output["echo"]["token"] == SECRET  # the run has it

    (request,) = openai_server.requests
    sent = json.dumps(request.body)
    assert "A-9" in sent and "Summarise the order" in sent
    assert SECRET not in sent
    assert _nodes(run)["write"]["output"] == {"summary": "order A-9 is fine"}


def test_the_guides_example_with_its_agent_node_is_a_valid_definition():
    guide = (Path(__file__).resolve().parents[2] / "docs/how-to/workflows.md").read_text()
    example = guide.split("```yaml\n", 1)[1].split("```", 1)[0]
    definition = load(parse_source(example), agents=["triager"], tools=[
        "lookup_order", "issue_refund", "cancel_refund", "notify_customer"])
    assert definition.node("triage").tool == "agent:triager"
    assert "agent:triager" in definition.tools
    with pytest.raises(DefinitionError) as refused:
        load(parse_source(example), agents=[], tools=[
            "lookup_order", "issue_refund", "cancel_refund", "notify_customer"])
    assert refused.value.errors == {"nodes[3].agent.name": ["no enabled agent named 'triager'"]}
