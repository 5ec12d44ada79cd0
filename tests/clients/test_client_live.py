"""The Python client (tether_client) against a live server: submit with an
idempotency key, follow a task to its end, decide an approval, manage tools
and agents; the API's refusals arrive as exceptions carrying its error code.
The async client does the same through asyncio."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tether_client import (
    AsyncTether,
    AuthenticationFailed,
    BadRequest,
    Conflict,
    NotFound,
    PermissionDenied,
    Tether,
    next_cursor,
)
from tether_client.models import Event, Task

from tasks_app.models import Event as EventRow
from tests.clients.conftest import FAILS, LOOKUP, REFUND, LiveTether
from tests.helpers import wait_for

pytestmark = [pytest.mark.system, pytest.mark.django_db(transaction=True),
              pytest.mark.postgres_only("the server process shares the test database")]


def _client(live: LiveTether, role: str) -> Tether:
    return Tether(live.url, live.keys[role])


def _waiting(client: Tether, task_id: int, status: str) -> Task:
    return wait_for(lambda: (t := client.task(task_id)).status == status and t,
                    timeout=60, interval=0.1, message=f"task {task_id} to be {status}")


def test_a_key_submits_once_and_follow_yields_every_event_once_to_the_end(
        live_tether: LiveTether) -> None:
    with _client(live_tether, "requester") as tether:
        first = tether.submit("support", "Where is A-1?", {"order": "A-1"}, script=LOOKUP,
                              idempotency_key="client-lookup-1")
        again = tether.submit("support", "Where is A-1?", {"order": "A-1"}, script=LOOKUP,
                              idempotency_key="client-lookup-1")
        assert again.id == first.id and first.agent == "support"

        followed = list(tether.follow(first.id, poll_interval=0.1))
        done = tether.task(first.id)

    assert done.status == "SUCCEEDED" and done.result == {"answer": "A-1 was delivered"}
    stored = list(EventRow.objects.filter(task_id=first.id).order_by("id")
                  .values_list("id", "type"))
    assert [(e.id, e.type) for e in followed if isinstance(e, Event)] == stored
    assert stored[-1][1] == "final_accepted"


def test_a_reviewer_approves_from_the_inbox_and_refusals_carry_the_api_code(
        live_tether: LiveTether, other_tenant_key: str) -> None:
    requester, reviewer = _client(live_tether, "requester"), _client(live_tether, "reviewer")
    task = requester.submit("support", "Refund A-2", script=REFUND)
    _waiting(requester, task.id, "WAITING_FOR_APPROVAL")

    inbox = reviewer.inbox()
    (item,) = [i for i in inbox.items if i.kind == "approval" and i.task["id"] == task.id]
    assert {a["name"] for a in item.actions} >= {"approve", "reject"}
    with pytest.raises(PermissionDenied) as refused:  # a requester may not decide
        requester.approve(item.id)
    assert refused.value.code == "role_required"
    with pytest.raises(BadRequest) as invalid:  # a rejection needs its reason
        reviewer.reject(item.id, comment="")
    assert invalid.value.code == "invalid" and "comment" in invalid.value.field_errors

    approved = reviewer.approve(item.id, comment="evidence checked")
    assert approved.status == "approved" and approved.decided_by == "t-main-reviewer"
    with pytest.raises(Conflict) as twice:
        reviewer.approve(item.id)
    assert twice.value.status == 409 and twice.value.code
    assert [e.type for e in requester.follow(task.id, poll_interval=0.1)][-1] == "final_accepted"
    assert requester.task(task.id).result == {"refunded_cents": 500}

    with pytest.raises(BadRequest) as unknown:
        requester.submit("no-such-agent", "anything")
    assert unknown.value.code == "invalid"
    assert unknown.value.field_errors == {"agent": ["no agent named 'no-such-agent'"]}
    with pytest.raises(NotFound) as elsewhere, Tether(live_tether.url, other_tenant_key) as other:
        other.task(task.id)  # another tenant's task does not exist for this key
    assert elsewhere.value.code == "not_found"
    with pytest.raises(AuthenticationFailed) as wrong, Tether(live_tether.url, "tk_wrong") as bad:
        bad.tasks()
    assert wrong.value.status == 401 and wrong.value.code == "authentication_failed"
    requester.close()
    reviewer.close()


def test_an_admin_manages_tools_and_agents(live_tether: LiveTether) -> None:
    with _client(live_tether, "admin") as admin:
        tool = admin.create_tool("client_lookup", kind="python",
                                 target="tools_app.demo.tools.lookup_order",
                                 args_schema={"type": "object"}, side_effect="read")
        assert (tool.name, tool.kind, tool.enabled) == ("client_lookup", "python", True)
        assert "client_lookup" in {t.name for t in admin.tools()}
        assert admin.update_tool("client_lookup", enabled=False).enabled is False
        assert admin.tool("client_lookup").enabled is False

        agent = admin.create_agent("client-agent", description="made by the client",
                                   tools=["lookup_order"], budget={"max_steps": 7})
        assert (agent.name, agent.tools, agent.budget.max_steps) == (
            "client-agent", ["lookup_order"], 7)
        changed = admin.update_agent("client-agent", description="changed")
        assert changed.description == "changed"
        assert admin.agent("client-agent").description == "changed"
        assert {"support", "client-agent"} <= {a.name for a in admin.agents()}
        with pytest.raises(NotFound):
            admin.agent("nobody")
        with pytest.raises(Conflict) as clash:
            admin.create_tool("client_lookup", kind="python",
                              target="tools_app.demo.tools.lookup_order")
        assert clash.value.code == "tool_exists"
        with pytest.raises(BadRequest) as bad:
            admin.update_tool("client_lookup", timeout_s=-1)
        assert "timeout_s" in bad.value.field_errors


def test_the_async_client_submits_follows_and_approves(live_tether: LiveTether) -> None:
    async def scenario() -> tuple[Any, list[str], Any]:
        async with AsyncTether(live_tether.url, live_tether.keys["requester"]) as requester, \
                AsyncTether(live_tether.url, live_tether.keys["reviewer"]) as reviewer:
            task = await requester.submit("support", "Refund A-2", script=REFUND,
                                          idempotency_key="async-refund")
            assert (await requester.submit("support", "Refund A-2", script=REFUND,
                                           idempotency_key="async-refund")).id == task.id
            types: list[str] = []
            async for event in requester.follow(task.id, poll_interval=0.1):
                types.append(event.type)
                if event.type == "need_approval":
                    page = await reviewer.approvals(task_id=task.id, status="pending")
                    await reviewer.approve(page.results[0].id, comment="fine")
            failed = await requester.submit("support", "Fail", script=FAILS)
            async for _ in requester.follow(failed.id, poll_interval=0.1):
                pass
            return await requester.task(task.id), types, await requester.task(failed.id)

    done, types, failed = asyncio.run(scenario())
    assert done.status == "SUCCEEDED" and done.result == {"refunded_cents": 500}
    assert types.index("need_approval") < types.index("approval_granted") < len(types) - 1
    assert types[-1] == "final_accepted"
    assert failed.status == "FAILED" and failed.failure_reason


def test_a_question_is_answered_a_failed_task_retried_and_its_steps_read(
        live_tether: LiveTether) -> None:
    requester, operator = _client(live_tether, "requester"), _client(live_tether, "operator")
    asked = requester.submit("support", "Refund part of A-1", script=[
        {"ask": "How much, in cents?"}, {"final": {"acknowledged": True}}])
    waiting = _waiting(requester, asked.id, "WAITING_FOR_INPUT")
    assert waiting.open_request is not None and waiting.open_request.kind == "question"
    (question,) = requester.questions(task_id=asked.id, status="open").results
    assert question.question == "How much, in cents?"
    with pytest.raises(Conflict):  # a stale view of the task is refused
        requester.answer(asked.id, "500", expected_version=waiting.version - 1)
    requester.answer(asked.id, "500", expected_version=waiting.version)
    list(requester.follow(asked.id, poll_interval=0.1))
    assert requester.task(asked.id).status == "SUCCEEDED"
    assert requester.questions(task_id=asked.id).results[0].answer == "500"

    failed = requester.submit("support", "Fail", script=FAILS)
    list(requester.follow(failed.id, poll_interval=0.1))
    steps = requester.steps(failed.id).results
    assert steps[0].tool == "lookup_order" and steps[0].decision.kind == "tool_call"
    with pytest.raises(PermissionDenied):
        requester.retry(failed.id)  # operators retry
    retried = operator.retry(failed.id, comment="once more")
    assert retried.retry_of is not None and retried.retry_of.task == failed.id
    assert operator.task(failed.id).retried_by == [retried.id]
    listed = operator.tasks(status="FAILED").results  # (the retry may have failed by now)
    assert failed.id in {t.id for t in listed} and {t.status for t in listed} == {"FAILED"}
    assert asked.id not in {t.id for t in listed}
    newest = operator.tasks(limit=1)
    older = operator.tasks(limit=1, cursor=next_cursor(newest))
    assert [t.id for t in newest.results + older.results] == [retried.id, failed.id]
    requester.close()
    operator.close()
