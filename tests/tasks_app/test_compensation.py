"""Irreversible failure → compensation of the task's successful writes, exactly once."""
from __future__ import annotations

import pytest

from tasks_app.machine import TaskStatus
from tasks_app.models import Event
from tasks_app.runner.compensation import compensate_task
from tasks_app.services.dispatch import MANUAL_COMPENSATIONS
from tests.factories import submit
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive
from tools_app.models import DemoNotification

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def compensable(world):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "undo_note", "undo_note", side_effect="write", max_retries=0)
    add_tool(world.tenant, "note", "note", side_effect="write", max_retries=0,
             compensation_tool="undo_note")
    add_tool(world.tenant, "echo", "echo", compensation_tool="undo_note")  # a read: nothing to undo
    add_tool(world.tenant, "deny", "deny")
    add_agent(world.tenant, "payer", ["note", "echo", "deny"])
    MANUAL_COMPENSATIONS.clear()
    return world


def test_a_failed_task_compensates_its_writes_once(compensable):
    task = submit(compensable.tenant, [
        {"tool": "note", "args": {"to": "ada", "text": "charged"}},
        {"tool": "echo", "args": {"x": 1}},
        {"tool": "deny", "args": {}},  # permission error: the task fails for good
    ], agent="payer")
    task = drive(task.pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    assert [task.pk] == MANUAL_COMPENSATIONS  # scheduled after the FAILED commit

    note_step = task.steps.get(step_no=1)
    assert compensate_task(task.pk) == 1
    undo = DemoNotification.objects.filter(customer="undo")
    assert [u.message for u in undo] == [note_step.idempotency_key]
    (event,) = Event.objects.filter(task=task, type="compensation_succeeded")
    assert event.payload["step_no"] == 1 and event.payload["compensation_tool"] == "undo_note"
    assert event.payload["result"]["undone"] == note_step.idempotency_key

    # again (a redelivered message, a second worker): the ledger answers, nothing runs twice
    assert compensate_task(task.pk) == 0
    assert undo.count() == 1
    assert Event.objects.filter(task=task, type__startswith="compensation_").count() == 1


def test_a_succeeded_task_is_not_compensated(compensable):
    task = submit(compensable.tenant, [
        {"tool": "note", "args": {"to": "ada", "text": "charged"}},
        {"final": {"ok": True}},
    ], agent="payer")
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert MANUAL_COMPENSATIONS == []
    assert compensate_task(task.pk) == 0
    assert not DemoNotification.objects.filter(customer="undo").exists()


def test_a_missing_compensation_tool_is_recorded_not_hidden(compensable):
    from tools_app.models import Tool

    task = submit(compensable.tenant, [
        {"tool": "note", "args": {"to": "ada", "text": "charged"}},
        {"tool": "deny", "args": {}},
    ], agent="payer")
    task = drive(task.pk)
    Tool.objects.filter(tenant=compensable.tenant, name="undo_note").update(enabled=False)
    assert compensate_task(task.pk) == 0
    (event,) = Event.objects.filter(task=task, type="compensation_failed")
    assert "missing or disabled" in event.payload["error"]
