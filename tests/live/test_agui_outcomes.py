"""How each way a run stops is told in AG-UI: the endpoint's AG-UI body
(`tasks_app.api.stream`) iterated in this process over the event source and
the test database; every message read back with the `ag-ui-protocol` types."""
from __future__ import annotations

import asyncio

import pytest
from ag_ui.core import Event, EventType
from asgiref.sync import sync_to_async
from django.db import connections
from pydantic import TypeAdapter

from foundations.actors import SYSTEM
from tasks_app import models
from tasks_app.api.stream import _agui
from tasks_app.machine import TaskStatus
from tasks_app.services.tasks import task_cancel
from tests.factories import submit
from tests.helpers import drive

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

EVENTS = TypeAdapter(Event)


@pytest.fixture(autouse=True)
def _close_thread_connections():  # type: ignore[no-untyped-def]
    """The source's reads run on asgiref's executor thread: close its connection."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


async def _run_of(task_id: int, status: str, after: int = 0) -> list:  # type: ignore[type-arg]
    messages = [m async for m in _agui(task_id, status, after)]
    return [EVENTS.validate_json(m.split("data: ", 1)[1]) for m in messages if "data: " in m]


async def test_a_question_is_an_input_interrupt(world):
    task = await sync_to_async(submit)(world.tenant, [{"ask": "Which order?"}, {"final": 1}])
    assert (await sync_to_async(drive)(task.pk)).status == TaskStatus.WAITING_FOR_INPUT

    events = await asyncio.wait_for(_run_of(task.pk, TaskStatus.WAITING_FOR_INPUT), 30)

    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED and finished.outcome.type == "interrupt"
    (interrupt,) = finished.outcome.interrupts
    assert (interrupt.reason, interrupt.message) == ("input", "Which order?")
    assert events[-2].snapshot["status"] == "WAITING_FOR_INPUT"


async def test_a_failed_task_is_a_run_error(world):
    task = await sync_to_async(submit)(world.tenant, [{"tool": "nope", "args": {}}])
    assert (await sync_to_async(drive)(task.pk)).status == TaskStatus.FAILED

    events = await asyncio.wait_for(_run_of(task.pk, TaskStatus.FAILED), 30)

    assert [e.type for e in events][-2:] == [EventType.STATE_SNAPSHOT, EventType.RUN_ERROR]
    assert events[-1].code == "model_unavailable" and "script" in events[-1].message
    assert EventType.RUN_FINISHED not in [e.type for e in events]


async def test_a_canceled_task_finishes_cancelled(world):
    task = await sync_to_async(submit)(world.tenant, [{"ask": "?"}])
    await sync_to_async(drive)(task.pk)
    await sync_to_async(task_cancel)(task_id=task.pk, actor=SYSTEM, reason="not needed")

    events = await asyncio.wait_for(_run_of(task.pk, TaskStatus.CANCELED), 30)

    # the question's interrupt closes the first run: a client reconnects after it
    assert events[-1].type == EventType.RUN_FINISHED
    assert events[-1].outcome.type == "interrupt"
    waited = await sync_to_async(
        lambda: models.Event.objects.get(task_id=task.pk, type="need_input").pk)()
    after = await asyncio.wait_for(_run_of(task.pk, TaskStatus.CANCELED, waited), 30)
    assert [e.type for e in after] == [
        EventType.RUN_STARTED, EventType.STATE_SNAPSHOT,  # a new run: the client reconnected
        EventType.STATE_SNAPSHOT, EventType.RUN_FINISHED]
    assert after[-1].outcome.type == "cancelled"
