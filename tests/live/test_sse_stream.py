"""`GET /api/v1/tasks/{id}/stream` over a real socket (uvicorn, the Redis
channel layer, the test database), the task run by this process's runner."""
from __future__ import annotations

import threading

import pytest
from django.db import connection

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from approvals_app.models import Approval
from approvals_app.services.decisions import approval_decide
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tests.factories import TenantFactory, actor_of, make_user, submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"order_id": "A-1", "amount_cents": 500, "reason": "damaged"}


@pytest.fixture
def key(world):  # type: ignore[no-untyped-def]
    return api_key_create(user=world.users[Role.REQUESTER])


def _types(events):  # type: ignore[no-untyped-def]
    return [e["type"] for e in events]


def _in_thread(fn, *args):  # type: ignore[no-untyped-def]
    """`fn(*args)` in a thread, whose database connection is closed after it."""
    def run() -> None:
        try:
            fn(*args)
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_tokens_arrive_before_the_decision_is_recorded(world, openai_server, asgi_server, key):
    openai_agent(world.tenant, openai_server, name="llm", model={"stream": True, "timeout_s": 120})
    openai_server.push(
        reply("Let me look the order up.", tool_calls=[("lookup_order", {"order_id": "A-1"})]),
        reply('{"answer": "A-1 is with Ada"}'))
    # the role and the text's 7 pieces, the call's name and a piece of its arguments
    hold = openai_server.hold(after=10)
    task = submit(world.tenant, None, agent="llm", goal="Where is order A-1?")
    stream = asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream", key=key)
    assert stream.status == 200
    stream.wait(lambda seen: seen, message="the replayed task_created")  # subscribed by now

    runner = _in_thread(drive, task.pk)
    assert hold.reached.wait(30), "the model's stream never reached the hold"
    tokens = stream.wait(lambda seen: [m.json() for m in seen if m.event == "tokens"
                                       and any(d["kind"] == "tool_call"
                                               for d in m.json()["deltas"])],
                         message="the tokens of the tool call being formed")
    text = "".join(d["text"] for t in tokens for d in t["deltas"] if d["kind"] == "text")
    assert text == "Let me look the order up."
    call = [d for t in tokens for d in t["deltas"] if d["kind"] == "tool_call"]
    assert call[0]["name"] == "lookup_order" and call[0]["index"] == 0
    assert tokens[0]["step_no"] == 1
    # Held midway: nothing recorded, nothing but the task's start on the stream.
    assert _types(stream.events()) == ["task_created", "task_started"]
    assert not Step.objects.filter(task=task).exists()

    hold.release()
    messages = stream.wait_end()
    runner.join(timeout=30)
    events = [m.json() for m in messages if m.event == "message"]
    assert _types(events) == list(
        Event.objects.filter(task=task).order_by("id").values_list("type", flat=True))
    assert _types(events)[-1] == "final_accepted"
    kinds = [m.event for m in messages]
    first_token = kinds.index("tokens")
    decided = next(i for i, m in enumerate(messages)
                   if m.event == "message" and m.json()["type"] == "decision_recorded")
    assert first_token < decided
    assert messages[-1].event == "end" and messages[-1].json() == {
        "status": "SUCCEEDED", "reason": "terminal"}
    assert all(m.id == str(m.json()["id"]) for m in messages if m.event == "message")
    assert all(m.id is None for m in messages if m.event != "message")


def test_a_client_that_reconnects_with_last_event_id_gets_every_event_once(
        world, asgi_server, key):
    task = submit(world.tenant, [{"tool": "lookup_order", "args": {"order_id": "A-1"}},
                                 {"tool": "issue_refund", "args": REFUND},
                                 {"final": {"refunded": True}}])
    first = asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream", key=key)
    assert drive(task.pk).status == TaskStatus.WAITING_FOR_APPROVAL
    first.wait(lambda seen: any(m.json()["type"] == "need_approval" for m in seen
                                if m.event == "message"), message="the approval wait")
    first.close()
    before = first.events()
    last_id = before[-1]["id"]

    # While nobody listens: approved, finished.
    approval_decide(approval_id=Approval.objects.get(task=task).pk, tenant_id=world.tenant.pk,
                    decision="approve", actor=actor_of(world.users[Role.REVIEWER]))
    assert drive(task.pk).status == TaskStatus.SUCCEEDED

    again = asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream?after=0", key=key,
                               headers={"Last-Event-ID": str(last_id)})
    messages = again.wait_end()
    after = [m.json() for m in messages if m.event == "message"]
    ids = [e["id"] for e in before + after]
    assert ids == list(Event.objects.filter(task=task).order_by("id").values_list("id", flat=True))
    assert len(set(ids)) == len(ids)
    assert after[0]["id"] > last_id and _types(after)[-1] == "final_accepted"
    assert messages[-1].event == "end"

    # `?after=` alone resumes too (no header: a first connection of a client that kept the id)
    tail = asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream?after={ids[-2]}", key=key)
    assert [e["id"] for e in [m.json() for m in tail.wait_end() if m.event == "message"]] == [
        ids[-1]]


def test_another_tenants_task_is_not_found_and_bad_input_is_a_400(world, asgi_server, key):
    other = TenantFactory(name="t-other")
    demo_tools_ensure(other)
    demo_agent_ensure(other)
    theirs = submit(other, [{"final": 1}])
    outsider = api_key_create(user=make_user(other, Role.REQUESTER))

    refused = asgi_server.stream(f"/api/v1/tasks/{theirs.pk}/stream", key=key)
    assert refused.status == 404 and b'"not_found"' in refused.body
    mine = submit(world.tenant, [{"final": 1}])
    assert asgi_server.stream(f"/api/v1/tasks/{mine.pk}/stream", key=outsider).status == 404
    assert asgi_server.stream(f"/api/v1/tasks/{mine.pk}/stream", key="nope").status == 401
    bad = asgi_server.stream(f"/api/v1/tasks/{mine.pk}/stream", key=key,
                             headers={"Last-Event-ID": "-3"})
    assert bad.status == 400 and b"Last-Event-ID" in bad.body
    bad = asgi_server.stream(f"/api/v1/tasks/{mine.pk}/stream?protocol=smoke", key=key)
    assert bad.status == 400 and b"protocol" in bad.body
