"""Memory in a task's steps, with the fake OpenAI-compatible server: the
`remember` decision under each policy, what later tasks' models are shown,
and that a subject's items never reach a task about another subject."""
from __future__ import annotations

import json

import pytest
from django.test import Client

from accounts_app.models import Role
from foundations.actors import Actor
from memory_app.models import MemoryItem, MemoryProposal, MemoryVersion, ProposalStatus
from memory_app.services import (
    item_create,
    item_delete,
    item_update,
    proposal_accept,
    proposal_reject,
)
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tasks_app.services.agents import agent_create
from tasks_app.services.demo import demo_tools_ensure
from tests.factories import TenantFactory, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

REVIEWER = Actor(name="rita", role="reviewer")
ADMIN = Actor(name="ada", role="admin")
WINDOW = {"text": "Prefers window seats on every flight", "kind": "preference",
          "scope": "subject"}


def _context_of(request) -> str:  # type: ignore[no-untyped-def]
    """The user message with the pinned facts and the memory block."""
    return request.body["messages"][1]["content"]


def _run(world, server, *, subject: str, goal: str = "Book a flight for the customer",
         replies=()):  # type: ignore[no-untyped-def]
    server.push(*replies, reply('{"answer": "done"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal=goal, subject=subject).pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    return task


def test_a_remembered_preference_reaches_the_same_subject_and_no_other(world, openai_server):
    openai_agent(world.tenant, openai_server, memory_policy="auto")
    first = _run(world, openai_server, subject="cust-S",
                 replies=[reply("Noting it.", tool_calls=[("remember", WINDOW)])])

    step = Step.objects.get(task=first, step_no=1)
    item = MemoryItem.objects.get()
    assert (step.kind, step.status) == ("memory", "SUCCEEDED")
    assert step.output == {"status": "saved", "id": f"mem:{item.pk}@1"}
    assert (item.scope, item.subject, item.text) == ("subject", "cust-S", WINDOW["text"])
    assert (item.source_task_id, item.source_step_no) == (first.pk, 1)
    written = Event.objects.get(task=first, type="memory_written")
    assert item.source_event_id == written.pk
    assert first.status == TaskStatus.SUCCEEDED  # the write did not stop the task
    # the model was offered `remember`, and saw its own call and result after it
    tools = {t["function"]["name"] for t in openai_server.requests[0].body["tools"]}
    assert {"remember", "ask_user"} <= tools
    call, result = openai_server.requests[1].body["messages"][2:4]
    assert call["tool_calls"][0]["function"]["name"] == "remember"
    assert json.loads(result["content"])["output"]["status"] == "saved"

    openai_server.requests.clear()
    cite = f"mem:{item.pk}@1"
    second = _run(world, openai_server, subject="cust-S", replies=[reply(tool_calls=[
        ("lookup_order", {"order_id": "A-1", "_cites": [cite]})])])
    seen = _context_of(openai_server.requests[0])
    assert WINDOW["text"] in seen
    assert f'"id": "{cite}"' in seen
    # fenced and labelled as data
    assert seen.index("<memory>") < seen.index(WINDOW["text"]) < seen.index("</memory>")
    assert "never instructions" in seen
    used = Step.objects.get(task=second, step_no=1)
    assert (used.model_log["memory_shown"], used.decision["cites"]) == ([cite], [cite])
    assert cite in used.model_log["input_summary"]
    # the task page shows what the model saw and what it cited
    client = Client()
    client.force_login(world.users[Role.OPERATOR])
    page = client.get(f"/tasks/{second.pk}/").content.decode()
    assert f'data-memory="{cite}" data-cited' in page
    assert f'href="/memory/{item.pk}/"' in page
    assert 'href="/memory/?subject=cust-S"' in page  # the subject, linked to its memory
    timeline = client.get(f"/tasks/{first.pk}/").content.decode()
    assert f"saved to memory as mem:{item.pk}@1" in timeline  # the write, in the timeline

    openai_server.requests.clear()
    _run(world, openai_server, subject="cust-T")
    _run(world, openai_server, subject="")
    assert len(openai_server.requests) == 2
    for request in openai_server.requests:
        assert WINDOW["text"] not in json.dumps(request.body)


def test_a_subjects_item_never_reaches_a_task_about_another_subject_or_tenant(
        world, openai_server):
    """Every request of a task about T, whose goal has the very words of S's
    item, and of a task of another tenant about S: shown the memory they may
    see (the memory block is on), never S's item, and `read_source` of its
    citation is refused like an id that does not exist."""
    openai_agent(world.tenant, openai_server, memory_policy="read")
    theirs = item_create(tenant_id=world.tenant.pk, actor=ADMIN, fields={
        "scope": "subject", "subject": "cust-S", **{k: WINDOW[k] for k in ("text", "kind")}})
    shared = item_create(tenant_id=world.tenant.pk, actor=ADMIN, fields={
        "scope": "tenant", "kind": "fact", "text": "Flights are booked through Acme"})
    other = TenantFactory(name="t-other")
    demo_tools_ensure(other)
    openai_agent(other, openai_server, memory_policy="read")
    for_other = item_create(tenant_id=other.pk, actor=ADMIN, fields={
        "scope": "tenant", "kind": "fact", "text": "Trains are booked through Rail Co"})
    goal = "Book window seats on every flight for the customer"
    replies = (reply(tool_calls=[("lookup_order", {"order_id": "A-1"})]),
               reply(tool_calls=[("read_source", {"ref": theirs.cite_id})]))

    for tenant, subject, allowed in ((world.tenant, "cust-T", shared),
                                     (other, "cust-S", for_other)):
        openai_server.requests.clear()
        openai_server.push(*replies, reply('{"answer": "done"}'))
        task = drive(submit(tenant, None, agent="llm", goal=goal, subject=subject).pk)
        assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
        assert len(openai_server.requests) == 3
        for request in openai_server.requests:
            said = json.dumps(request.body)
            assert WINDOW["text"] not in said and allowed.text in said, subject
        read = Step.objects.get(task=task, step_no=2)
        assert (read.status, read.error["type"]) == ("FAILED", "source_not_found")
        shown = {c for s in Step.objects.filter(task=task)
                 for c in (s.model_log or {}).get("memory_shown", [])}
        assert shown == {allowed.cite_id}, subject

    # the control: a task about S, in S's tenant, is shown it and may read it back
    openai_server.requests.clear()
    openai_server.push(*replies, reply('{"answer": "done"}'))
    task = drive(submit(world.tenant, None, agent="llm", goal=goal, subject="cust-S").pk)
    assert WINDOW["text"] in _context_of(openai_server.requests[0])
    assert Step.objects.get(task=task, step_no=2).status == "SUCCEEDED"


def test_a_proposed_write_waits_for_a_reviewer_and_a_rejected_one_is_never_written(
        world, openai_server):
    openai_agent(world.tenant, openai_server, memory_policy="propose")
    task = _run(world, openai_server, subject="cust-S",
                replies=[reply(tool_calls=[("remember", WINDOW)]),
                         reply(tool_calls=[("remember", {**WINDOW, "text": "Hates aisles"})])])
    # the task did not wait for the proposals
    assert task.status == TaskStatus.SUCCEEDED
    first, second = MemoryProposal.objects.order_by("id")
    assert (first.status, first.task_id, first.step_no) == (ProposalStatus.OPEN, task.pk, 1)
    assert not MemoryItem.objects.exists()
    assert Event.objects.filter(task=task, type="memory_proposed").count() == 2

    openai_server.requests.clear()
    _run(world, openai_server, subject="cust-S")
    assert WINDOW["text"] not in _context_of(openai_server.requests[0])  # not written yet

    proposal_reject(tenant_id=world.tenant.pk, proposal_id=second.pk, actor=REVIEWER,
                    note="not a preference")
    item = proposal_accept(tenant_id=world.tenant.pk, proposal_id=first.pk, actor=REVIEWER,
                           edits={"text": "Prefers window seats"})
    assert list(MemoryItem.objects.values_list("text", flat=True)) == ["Prefers window seats"]
    assert (item.source_task_id, item.source_step_no, item.created_by) == (task.pk, 1, "rita")
    assert set(Event.objects.filter(task=task, type__startswith="memory_").values_list(
        "type", flat=True)) == {"memory_proposed", "memory_accepted", "memory_rejected"}

    openai_server.requests.clear()
    _run(world, openai_server, subject="cust-S")
    seen = _context_of(openai_server.requests[0])
    assert "Prefers window seats" in seen and "Hates aisles" not in seen


def test_an_update_keeps_the_old_version_and_a_deleted_item_leaves_later_contexts(
        world, openai_server):
    openai_agent(world.tenant, openai_server, memory_policy="read")
    item = item_create(tenant_id=world.tenant.pk, actor=ADMIN, fields={
        "scope": "subject", "subject": "cust-S", "kind": "fact",
        "text": "Lives in Lisbon"})
    item_update(tenant_id=world.tenant.pk, item_id=item.pk, actor=ADMIN,
                changes={"text": "Lives in Porto"})
    old, new = MemoryVersion.objects.filter(item=item).order_by("version")
    assert (old.version, old.text) == (1, "Lives in Lisbon")
    assert (new.version, new.text) == (2, "Lives in Porto")

    _run(world, openai_server, subject="cust-S")
    seen = _context_of(openai_server.requests[0])
    assert f"mem:{item.pk}@2" in seen and "Lives in Porto" in seen and "Lisbon" not in seen
    tools = {t["function"]["name"] for t in openai_server.requests[0].body["tools"]}
    assert "remember" not in tools  # `read`: shown memory, offered no write

    item_delete(tenant_id=world.tenant.pk, item_id=item.pk, actor=ADMIN)
    assert not MemoryVersion.objects.filter(item_id=item.pk).exists()
    openai_server.requests.clear()
    _run(world, openai_server, subject="cust-S")
    assert "Porto" not in _context_of(openai_server.requests[0])
    assert "<memory>" not in _context_of(openai_server.requests[0])


def test_an_invalid_remember_goes_back_to_the_model_and_writes_nothing(world, openai_server):
    openai_agent(world.tenant, openai_server, memory_policy="auto")
    task = _run(world, openai_server, subject="",
                replies=[reply(tool_calls=[("remember", WINDOW)])])  # no subject to remember
    step = Step.objects.get(task=task, step_no=1)
    assert step.kind == "invalid"
    assert "no subject" in step.error["message"]
    assert not MemoryItem.objects.exists()
    result = openai_server.requests[1].body["messages"][3]
    assert result["role"] == "tool" and "NOT_ACCEPTED" in result["content"]


def test_an_agent_with_memory_off_is_shown_none_and_may_write_none(world, openai_server):
    openai_agent(world.tenant, openai_server)
    item_create(tenant_id=world.tenant.pk, actor=ADMIN, fields={
        "scope": "tenant", "kind": "fact", "text": "Flights are booked through Acme"})
    task = _run(world, openai_server, subject="cust-S", goal="Book a flight",
                replies=[reply(tool_calls=[("remember", {**WINDOW, "scope": "tenant"})])])
    assert "Acme" not in json.dumps(openai_server.requests[0].body)
    assert Step.objects.get(task=task, step_no=1).kind == "invalid"
    assert MemoryItem.objects.count() == 1


def test_a_scripted_agent_remembers_with_a_remember_entry(world):
    agent_create(tenant_id=world.tenant.pk, name="noter", memory_policy="auto",
                 tools=["lookup_order"])
    task = drive(submit(world.tenant, [
        {"remember": {"text": "Ships only on Mondays", "kind": "fact", "scope": "agent"}},
        {"final": {"ok": True}}], agent="noter").pk)
    assert task.status == TaskStatus.SUCCEEDED
    item = MemoryItem.objects.get()
    assert (item.scope, item.agent_id, item.source_task_id) == ("agent", task.agent_id, task.pk)
    assert Step.objects.get(task=task, step_no=1).decision == {
        "kind": "remember", "cites": [],
        "memory": {"text": "Ships only on Mondays", "kind": "fact", "scope": "agent"}}
