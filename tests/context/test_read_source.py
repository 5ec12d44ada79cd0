"""`read_source {ref}`: the model reads back an original it was shown shortened,
from its own task's history or its scopes' memory, and nothing else."""
from __future__ import annotations

import json

import pytest
from rest_framework.test import APIClient

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from foundations.actors import Actor
from memory_app.services import item_create
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive, task_page

pytestmark = pytest.mark.django_db(transaction=True)

ADMIN = Actor(name="ada", role="admin")
SECRET = "the other customer's card ends in 4242"


def _tool_result(request, step_no: int) -> dict:  # type: ignore[no-untyped-def]
    """The result the model was given for step `step_no`'s call."""
    for message in request.body["messages"]:
        if message.get("role") == "tool" and message["tool_call_id"] == f"step_{step_no}":
            return json.loads(message["content"])
    raise AssertionError(f"no result of step {step_no} in the request")


def test_read_source_returns_the_original_step_output_and_refuses_another_tasks_event(
        world, openai_server):
    add_tool(world.tenant, "echo", "echo")
    openai_agent(world.tenant, openai_server, tools=["echo"])
    # another task of the same tenant, with an event the model must never read
    add_agent(world.tenant, "scripted", ["echo"])
    other = drive(submit(world.tenant, [{"tool": "echo", "args": {"note": SECRET}},
                                        {"final": {}}], agent="scripted", goal="Other").pk)
    foreign = Event.objects.filter(task=other).latest("id")

    long_text = "Line of the customer's letter. " * 120 + "The order is C-55123."
    openai_server.push(
        reply(tool_calls=[("echo", {"letter": long_text})]),
        reply(tool_calls=[("read_source", {"ref": "step:1", "_cites": ["step:1"]})]),
        reply(tool_calls=[("read_source", {"ref": f"event:{foreign.pk}"})]),
        reply(tool_calls=[("read_source", {"ref": "step:99"})]),
        reply('{"answer": "done"}'),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Read the letter").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    requests = openai_server.requests

    # the letter was shown cut, with read_source offered
    shown = _tool_result(requests[1], 1)["output"]
    assert shown["truncated"] is True and "C-55123" not in json.dumps(shown)
    assert "read_source" in {t["function"]["name"] for t in requests[1].body["tools"]}

    read = Step.objects.get(task=task, step_no=2)
    assert (read.kind, read.status, read.tool) == ("read", "SUCCEEDED", "read_source")
    assert read.decision == {"kind": "read_source", "ref": "step:1", "cites": ["step:1"]}
    assert read.output["original"]["output"] == {"echo": {"letter": long_text}}
    # the model got the original, whole, as the call's result
    got = _tool_result(requests[2], 2)["output"]
    assert got["ref"] == "step:1" and got["original"]["output"]["echo"]["letter"] == long_text

    refused = Step.objects.get(task=task, step_no=3)
    assert (refused.kind, refused.status) == ("read", "FAILED")
    assert refused.error["type"] == "source_not_found" and refused.output is None
    missing = Step.objects.get(task=task, step_no=4)
    # another task's event reads exactly like an id that does not exist: nothing leaks
    assert missing.error["type"] == refused.error["type"]
    seen = json.dumps([r.body for r in requests])
    assert SECRET not in seen
    assert _tool_result(requests[3], 3)["error"]["type"] == "source_not_found"
    # each read is a step of the task, counted like any
    assert task.steps_count == 5 and task.model_calls == 5
    page = task_page(world.users[Role.OPERATOR], task.pk)
    assert 'data-read-source="step:1"' in page and f'data-read-source="event:{foreign.pk}"' in page


def test_read_source_reads_a_memory_version_of_the_tasks_subject_only(world, openai_server):
    openai_agent(world.tenant, openai_server, memory_policy="read")
    mine = item_create(tenant_id=world.tenant.pk, actor=ADMIN, fields={
        "scope": "subject", "subject": "cust-S", "kind": "preference",
        "text": "Prefers store credit to refunds"})
    theirs = item_create(tenant_id=world.tenant.pk, actor=ADMIN, fields={
        "scope": "subject", "subject": "cust-T", "kind": "fact",
        "text": "Lives at 12 Secret Street"})
    openai_server.push(
        reply(tool_calls=[("read_source", {"ref": mine.cite_id, "_cites": [mine.cite_id]})]),
        reply(tool_calls=[("read_source", {"ref": theirs.cite_id})]),
        reply('{"answer": "done"}'),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Refund the customer",
                        subject="cust-S").pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    ok, other = (Step.objects.get(task=task, step_no=n) for n in (1, 2))
    assert ok.output["original"]["text"] == "Prefers store credit to refunds"
    assert ok.output["original"]["id"] == mine.cite_id
    assert (other.status, other.error["type"]) == ("FAILED", "source_not_found")
    assert "Secret Street" not in json.dumps([r.body for r in openai_server.requests])
    # the decision log: which memory the model was shown, which the decision cited
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users['operator'])}")
    steps = client.get(f"/api/v1/tasks/{task.pk}/steps").json()
    first = (steps["results"] if isinstance(steps, dict) else steps)[0]
    assert first["model_log"]["memory_shown"] == [mine.cite_id]
    assert first["decision"] == {"kind": "read_source", "ref": mine.cite_id,
                                 "cites": [mine.cite_id]}
