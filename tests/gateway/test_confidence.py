"""An agent's `min_confidence`, against the fake OpenAI-compatible server: the
model is told to give `_confidence`, a tool call below the threshold waits for
an approval whose card shows the confidence, and a final answer below it waits
for a reviewer who accepts it or sends it back."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts_app.models import Role
from approvals_app.models import Approval
from approvals_app.services.decisions import approval_decide
from foundations.errors import DomainError
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tests.factories import actor_of, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.helpers import drive
from tools_app.models import Tool

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"order_id": "A-2", "amount_cents": 1200, "reason": "damaged"}


def _agent(world, server, **fields):  # type: ignore[no-untyped-def]
    # the refund tool needs no approval of its own here: only the confidence can ask for one
    Tool.objects.filter(tenant=world.tenant, name="issue_refund").update(requires_approval=False)
    return openai_agent(world.tenant, server, min_confidence=0.8, **fields)


def _decide(world, approval: Approval, decision: str, **kw):  # type: ignore[no-untyped-def]
    return approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk,
                           actor=actor_of(world.users["reviewer"]), decision=decision, **kw)


def test_a_low_confidence_refund_becomes_an_approval_showing_the_confidence(
        world, openai_server):
    _agent(world, openai_server)
    openai_server.push(
        reply("Refunding.", tool_calls=[("issue_refund", {**REFUND, "_confidence": 0.4})]),
        reply('{"answer": "refunded", "_confidence": 0.95}'),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Refund A-2").pk)

    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    step = Step.objects.get(task=task, step_no=1)
    assert (step.tool, step.status, step.args) == ("issue_refund", "PENDING_APPROVAL", REFUND)
    assert step.decision["confidence"] == 0.4
    approval = Approval.objects.get(task=task, status="pending")
    assert (approval.preview["confidence"], approval.preview["min_confidence"]) == (0.4, 0.8)
    # the model was told to give its confidence, in the rules and in each tool's schema
    first = openai_server.requests[0].body
    assert "_confidence" in first["messages"][0]["content"]
    refund = next(t for t in first["tools"] if t["function"]["name"] == "issue_refund")
    assert refund["function"]["parameters"]["properties"]["_confidence"]["maximum"] == 1
    # the reviewer's card shows it
    client = Client()
    client.force_login(world.users[Role.REVIEWER])
    html = client.get("/inbox/").content.decode()
    assert "confidence 0.4" in html and "below the agent's threshold of 0.8" in html

    _decide(world, approval, "approve")
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert Step.objects.get(task=task, step_no=1).status == "SUCCEEDED"


def test_a_confident_call_or_one_without_a_confidence_runs_at_once(world, openai_server):
    _agent(world, openai_server)
    openai_server.push(
        reply(tool_calls=[("issue_refund", {**REFUND, "_confidence": 0.9})]),
        reply(tool_calls=[("lookup_order", {"order_id": "A-2"})]),
        reply('{"answer": "refunded"}'),
    )
    task = drive(submit(world.tenant, None, agent="llm", goal="Refund A-2").pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert not Approval.objects.filter(task=task).exists()


def test_an_unsure_final_answer_waits_for_a_reviewer_who_sends_it_back_then_accepts(
        world, openai_server):
    _agent(world, openai_server)
    openai_server.push(reply('{"answer": "A-2 was refunded", "_confidence": 0.3}'),
                       reply('{"answer": "A-2 was refunded in full", "_confidence": 0.5}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="Was A-2 refunded?").pk)

    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    review = Approval.objects.get(task=task, status="pending")
    assert (review.tool, review.preview["final"], review.preview["confidence"]) == (
        "final_answer", True, 0.3)
    assert review.args == {"answer": "A-2 was refunded"}
    # a final answer is accepted or sent back: neither answered for nor edited
    with pytest.raises(DomainError):
        _decide(world, review, "respond", output={"answer": "something else"})
    with pytest.raises(DomainError):
        _decide(world, review, "approve", args={"answer": "edited"})

    _decide(world, review, "reject", comment="Say how much was refunded.")
    task = drive(task.pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL  # the second answer is unsure too
    said = json.dumps(openai_server.requests[1].body["messages"])
    assert "Say how much was refunded." in said and "A-2 was refunded" in said

    _decide(world, Approval.objects.get(task=task, status="pending"), "approve")
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"answer": "A-2 was refunded in full"}
    assert len(openai_server.requests) == 2  # accepting asks the model nothing
    finals = list(Step.objects.filter(task=task, kind="final").order_by("step_no")
                  .values_list("status", flat=True))
    assert finals == ["REJECTED", "SUCCEEDED"]
    assert Event.objects.get(task=task, type="final_accepted").payload["reviewed"] is True


def test_a_confidence_out_of_range_is_fed_back_to_the_model(world, openai_server):
    _agent(world, openai_server)
    openai_server.push(reply(tool_calls=[("lookup_order", {"order_id": "A-2",
                                                           "_confidence": 7})]),
                       reply('{"answer": "ok"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal="Look A-2 up").pk)

    assert task.status == TaskStatus.SUCCEEDED
    invalid = Step.objects.get(task=task, step_no=1)
    assert invalid.kind == "invalid" and "from 0 to 1" in invalid.error["message"]
