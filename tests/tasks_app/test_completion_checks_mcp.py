"""Completion checks whose tool is an MCP tool, against the SDK's own server
(`tests.fakes.mcp_server`, a process of its own) and the fake
OpenAI-compatible model: the check's `verify` tool answers
`{"pass": ..., "reason": ...}` as structured content; an error answer of the
server is never a pass."""
from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.mcp_process import McpTestServer
from tests.fakes.openai_server import reply
from tests.fakes.runtime import add_agent
from tests.helpers import drive, task_page

pytestmark = pytest.mark.django_db(transaction=True)

CHECK = {"tool": "shop__verify",
         "args": {"order_id": "${ output.order_id }", "customer": "${ inputs.customer }"}}


def _admin(world: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=world.users['admin'])}")
    return client


def _register(world: Any, server: McpTestServer, *answers: dict[str, Any],
              confirm: bool = True) -> None:
    """The shop server with `verify` listed (answering `answers` in turn), its
    settings confirmed by an admin as a read that needs no approval."""
    server.queue_verdicts(*answers)
    admin = _admin(world)
    registered = admin.post("/api/v1/mcp-servers", {"name": "shop", "url": server.url},
                            format="json")
    assert registered.status_code == 201, registered.content
    if confirm:
        saved = admin.patch("/api/v1/tools/shop__verify",
                            {"side_effect": "read", "requires_approval": False,
                             "max_retries": 1, "retry_delays_s": [0]}, format="json")
        assert saved.status_code == 200, saved.content


def _checks(task_id: int) -> list[dict[str, Any]]:
    return [e.payload for e in Event.objects.filter(task_id=task_id, type="completion_check")
            .order_by("id")]


def _run_scripted(world: Any, answers: int, **agent: Any) -> Task:
    add_agent(world.tenant, "checked", [], completion_checks=[CHECK], **agent)
    script = [{"final": {"order_id": "A-1"}}] * answers
    return drive(submit(world.tenant, script, agent="checked", input={"customer": "Ada"}).pk)


def test_an_mcp_check_that_fails_once_then_passes_ends_succeeded_after_two_answers(
        world, openai_server, mcp_server):
    _register(world, mcp_server,
              {"pass": False, "reason": "no refund recorded for A-9"},
              {"pass": True, "reason": "refund of A-2 recorded"})
    openai_agent(world.tenant, openai_server, completion_checks=[CHECK])
    openai_server.push(reply('{"order_id": "A-9", "done": true}'),
                       reply('{"order_id": "A-2", "done": true}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="Refund A-2",
                        input={"customer": "Ada"}).pk)

    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    assert task.result == {"order_id": "A-2", "done": True}
    # two answers, each checked by the MCP server, on the timeline
    assert [(c["tool"], c["attempt"], c["passed"], c["reason"]) for c in _checks(task.pk)] == [
        ("shop__verify", 1, False, "no refund recorded for A-9"),
        ("shop__verify", 2, True, "refund of A-2 recorded")]
    calls = mcp_server.calls_of("verify")
    assert [c["args"] for c in calls] == [{"order_id": "A-9", "customer": "Ada"},
                                          {"order_id": "A-2", "customer": "Ada"}]
    steps = list(Step.objects.filter(task=task).order_by("step_no"))
    assert [(s.kind, s.tool, s.status) for s in steps] == [
        ("tool", "shop__verify", "SUCCEEDED"), ("invalid", "", "FAILED"),
        ("tool", "shop__verify", "SUCCEEDED"), ("final", "", "SUCCEEDED")]
    # each check call went through the ledger with its step's idempotency key
    assert [c["key"] for c in calls] == [steps[0].idempotency_key, steps[2].idempotency_key]
    assert steps[-1].decision["check"]["passed"] == [
        {"step_no": 3, "tool": "shop__verify", "passed": True,
         "reason": "refund of A-2 recorded"}]
    # the refusal went back to the model as the reason its answer was not accepted
    said = json.dumps(openai_server.requests[1].body["messages"])
    assert "not accepted" in said and "no refund recorded for A-9" in said
    offered = {t["function"]["name"] for t in openai_server.requests[0].body["tools"]}
    assert "shop__verify" not in offered
    html = task_page(world.users[Role.OPERATOR], task.pk)
    assert "completion check 1 of 1 failed (answer 1)" in html
    assert "completion check 1 of 1 passed (answer 2)" in html


def test_an_mcp_error_answer_is_never_a_pass(world, mcp_server):
    """`isError` (even with a text saying it passes), then a tool the server no
    longer lists: both are failed checks, and with no answers left the task fails."""
    _register(world, mcp_server, {"error": json.dumps({"pass": True, "reason": "A-1 unknown"})})
    mcp_server.reset()  # `verify` is gone from the server: its next call is answered an error
    task = _run_scripted(world, 3, max_completion_attempts=2)

    assert task.status == TaskStatus.FAILED
    assert task.failure_reason == "completion_checks"
    verdicts = _checks(task.pk)
    assert [(c["attempt"], c["passed"]) for c in verdicts] == [(1, False), (2, False)]
    assert all(c["reason"].startswith("the check answered an error") for c in verdicts)
    assert task.result is None and not Step.objects.filter(task=task, kind="final").exists()
    assert task.model_calls == 2


def test_an_answer_in_a_text_block_only_is_read_like_structured_content(world, mcp_server):
    """A server that sends the JSON as text and no structured content (as servers
    did before structured output) answers the same."""
    _register(world, mcp_server, {"text": {"pass": False, "reason": "not yet"}},
              {"text": {"pass": True, "reason": "done"}})
    task = _run_scripted(world, 2)

    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    assert [(c["passed"], c["reason"]) for c in _checks(task.pk)] == [
        (False, "not yet"), (True, "done")]


def test_an_unconfirmed_mcp_tool_cannot_be_a_check(world, mcp_server):
    """Until an admin confirms it, an MCP tool is a write that needs approval,
    whatever its server's `readOnlyHint` says: not a check."""
    _register(world, mcp_server, {"pass": True, "reason": "ok"}, confirm=False)
    made = _admin(world).post("/api/v1/agents", {
        "name": "checked", "model": {"backend": "scripted", "name": "scripted"},
        "tools": ["lookup_order"], "completion_checks": [CHECK]}, format="json")

    assert made.status_code == 400, made.content
    details = made.json()["error"]["details"]
    assert "not confirmed" in str(details["completion_checks[0].tool"])



def test_a_check_whose_tool_left_its_server_is_not_asked_and_the_task_ends(world, mcp_server):
    """The server dropped `verify` after the profile was saved: the refresh
    disables the tool, and an answer that cannot be checked is not accepted."""
    _register(world, mcp_server)
    mcp_server.reset()
    refreshed = _admin(world).post("/api/v1/mcp-servers/shop/refresh", format="json")
    assert refreshed.json()["changes"]["gone"] == ["shop__verify"]
    task = _run_scripted(world, 2, on_exhaustion="escalate")

    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    assert mcp_server.calls_of("verify") == [] and _checks(task.pk) == []
    escalated = Event.objects.get(task=task, type="escalated")
    assert escalated.payload["reason"] == "completion_checks"
    assert escalated.payload["detail"]["type"] == "completion_check_unavailable"
    assert "gone or disabled" in escalated.payload["detail"]["message"]
    assert task.model_calls == 1  # the model is not asked again: no answer could pass
    assert not Step.objects.filter(task=task, kind="final").exists()
