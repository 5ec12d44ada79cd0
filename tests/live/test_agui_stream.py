"""The stream endpoint speaking AG-UI (`?protocol=ag-ui` or the `Accept`
header), over a real socket; every message is read back with the
`ag-ui-protocol` package's own event types."""
from __future__ import annotations

import threading

import pytest
from ag_ui.core import Event, EventType
from django.db import connection
from pydantic import TypeAdapter

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from tasks_app.machine import TaskStatus
from tasks_app.models import Step
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

EVENTS = TypeAdapter(Event)
REFUND = {"order_id": "A-1", "amount_cents": 500, "reason": "damaged"}
E = EventType


@pytest.fixture
def key(world):  # type: ignore[no-untyped-def]
    return api_key_create(user=world.users[Role.REQUESTER])


def _agui(stream):  # type: ignore[no-untyped-def]
    assert stream.status == 200, stream.body
    return [EVENTS.validate_json(m.data) for m in stream.wait_end()]


def test_a_run_that_finishes(world, asgi_server, key):
    task = drive(submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "find it"},
        {"final": {"customer": "Ada"}}]).pk)
    assert task.status == TaskStatus.SUCCEEDED

    events = _agui(asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream?protocol=ag-ui", key=key))

    assert [e.type for e in events] == [
        E.RUN_STARTED, E.STATE_SNAPSHOT,  # the connection opens a run, with the task's state
        E.STATE_SNAPSHOT, E.STATE_SNAPSHOT,  # replayed: task_created, task_started
        E.STEP_STARTED, E.TEXT_MESSAGE_START, E.TEXT_MESSAGE_CONTENT, E.TEXT_MESSAGE_END,
        E.TOOL_CALL_START, E.TOOL_CALL_ARGS, E.TOOL_CALL_END, E.TOOL_CALL_RESULT,
        E.STEP_FINISHED, E.STEP_STARTED, E.STEP_FINISHED,
        E.STATE_SNAPSHOT, E.RUN_FINISHED,
    ]
    started, finished = events[0], events[-1]
    assert (started.thread_id, started.run_id) == (f"task-{task.pk}", str(task.pk))
    assert events[6].delta == "find it"
    call, args, result = events[8], events[9], events[11]
    assert call.tool_call_name == "lookup_order"
    assert args.delta == '{"order_id": "A-1"}' and args.tool_call_id == call.tool_call_id
    assert result.tool_call_id == call.tool_call_id and '"customer": "Ada"' in result.content
    assert [e.step_name for e in events if e.type in (E.STEP_STARTED, E.STEP_FINISHED)] == [
        "step 1", "step 1", "step 2", "step 2"]
    assert events[-2].snapshot["status"] == "SUCCEEDED"
    assert finished.result == {"customer": "Ada"} and finished.outcome is None


def test_a_run_that_waits_for_an_approval_finishes_with_an_interrupt(world, asgi_server, key):
    task = drive(submit(world.tenant, [{"tool": "issue_refund", "args": REFUND},
                                       {"final": {"refunded": True}}]).pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL

    stream = asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream", key=key,
                                headers={"Accept": "application/vnd.ag-ui+json"})
    events = _agui(stream)  # it ends: the run is over until a person decides

    assert [e.type for e in events] == [
        E.RUN_STARTED, E.STATE_SNAPSHOT, E.STATE_SNAPSHOT, E.STATE_SNAPSHOT,
        E.STEP_STARTED, E.TOOL_CALL_START, E.TOOL_CALL_ARGS, E.TOOL_CALL_END,
        E.STEP_FINISHED, E.STATE_SNAPSHOT, E.RUN_FINISHED,
    ]
    call, finished = events[5], events[-1]
    assert call.tool_call_name == "issue_refund"
    assert '"amount_cents": 500' in events[6].delta
    assert events[-2].snapshot["status"] == "WAITING_FOR_APPROVAL"
    (interrupt,) = finished.outcome.interrupts
    assert finished.outcome.type == "interrupt"
    assert interrupt.reason == "approval" and interrupt.tool_call_id == call.tool_call_id
    # the last message carries the id of the event it came from: a reconnect resumes after it
    assert stream.seen()[-1].id is not None


def test_a_streamed_decision_is_told_as_it_forms(world, openai_server, asgi_server, key):
    openai_agent(world.tenant, openai_server, name="llm", model={"stream": True, "timeout_s": 120})
    openai_server.push(
        reply("Checking.", tool_calls=[("lookup_order", {"order_id": "A-1"})]),
        reply('{"answer": "with Ada"}'))
    hold = openai_server.hold(after=6)  # the role, the text, the call's name, a piece of it
    task = submit(world.tenant, None, agent="llm", goal="Where is order A-1?")
    stream = asgi_server.stream(f"/api/v1/tasks/{task.pk}/stream?protocol=ag-ui", key=key)
    stream.wait(lambda seen: len(seen) >= 3, message="the run to start")  # subscribed
    runner = threading.Thread(target=_drive_and_close, args=(task.pk,), daemon=True)
    runner.start()
    assert hold.reached.wait(30)
    stream.wait(lambda seen: any('"TOOL_CALL_ARGS"' in m.data for m in seen),
                message="the call's arguments as they form")
    assert not Step.objects.filter(task=task).exists()  # told before it is recorded
    hold.release()
    events = _agui(stream)
    runner.join(timeout=30)

    types = [e.type for e in events]
    assert types[0] == E.RUN_STARTED and types[-1] == E.RUN_FINISHED
    text = "".join(e.delta for e in events if e.type == E.TEXT_MESSAGE_CONTENT)
    assert text.startswith("Checking.")
    (start,) = [e for e in events if e.type == E.TOOL_CALL_START]
    args = "".join(e.delta for e in events if e.type == E.TOOL_CALL_ARGS)
    # the rest of the arguments arrived after the release, before the recorded decision
    assert start.tool_call_name == "lookup_order" and args == '{"order_id": "A-1"}'
    ends = [e for e in events if e.type == E.TOOL_CALL_END]
    result = next(e for e in events if e.type == E.TOOL_CALL_RESULT)
    assert [e.tool_call_id for e in ends] == [start.tool_call_id] == [result.tool_call_id]
    assert types.index(E.TOOL_CALL_ARGS) < types.index(E.TOOL_CALL_END)
    assert Step.objects.get(task=task, step_no=1).decision["args"] == {"order_id": "A-1"}
    assert events[-1].result == {"answer": "with Ada"}


def _drive_and_close(task_id: int) -> None:
    try:
        drive(task_id)
    finally:
        connection.close()  # this thread's: the test database is dropped after
