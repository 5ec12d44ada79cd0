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


def _failed_after_a_write(world):  # type: ignore[no-untyped-def]
    task = submit(world.tenant, [
        {"tool": "note", "args": {"to": "ada", "text": "charged"}},
        {"tool": "deny", "args": {}},  # permission error: the task fails for good
    ], agent="payer")
    return drive(task.pk)


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

    task = _failed_after_a_write(compensable)
    Tool.objects.filter(tenant=compensable.tenant, name="undo_note").update(enabled=False)
    assert compensate_task(task.pk) == 0
    (event,) = Event.objects.filter(task=task, type="compensation_failed")
    assert "missing or disabled" in event.payload["error"]


def test_a_lost_compensation_is_handed_out_again_until_a_run_ends(compensable):
    """The FAILED commit schedules the compensation; should that message be lost,
    the recovery sweep hands it out again once `COMPENSATION_RESWEEP_S` passed."""
    from datetime import timedelta

    from django.utils import timezone

    from tasks_app.models import Task
    from tasks_app.runner.recovery import recovery_sweep

    task = _failed_after_a_write(compensable)
    assert task.status == TaskStatus.FAILED and [task.pk] == MANUAL_COMPENSATIONS
    assert task.compensation_due_at is not None and task.compensation_due_at > task.finished_at
    assert recovery_sweep().compensations_resent == 0  # not due yet: it may be running

    # That message was lost (nobody ran it) and the time has passed.
    Task.objects.filter(pk=task.pk).update(compensation_due_at=timezone.now())
    assert recovery_sweep().compensations_resent == 1
    assert [task.pk, task.pk] == MANUAL_COMPENSATIONS
    due = Task.objects.get(pk=task.pk).compensation_due_at
    assert due > timezone.now() + timedelta(seconds=60)  # one at a time
    assert recovery_sweep().compensations_resent == 0

    assert compensate_task(task.pk) == 1  # a run ends: nothing is due any more
    assert Task.objects.get(pk=task.pk).compensation_due_at is None
    assert DemoNotification.objects.filter(customer="undo").count() == 1


def test_a_call_another_run_holds_is_left_to_it_and_stays_due(compensable):
    from datetime import timedelta

    from django.utils import timezone

    from tasks_app.keys import compensation_key
    from tasks_app.models import Task
    from tools_app.models import LedgerStatus, ToolExecution

    task = _failed_after_a_write(compensable)
    note_step = task.steps.get(step_no=1)
    # Another run (a redelivered message, a resweep) is calling the compensation now.
    ToolExecution.objects.create(
        idempotency_key=compensation_key(note_step.idempotency_key), tool="undo_note", args={},
        task_id=task.pk, step_id=note_step.pk, tenant_id=task.tenant_id,
        status=LedgerStatus.IN_PROGRESS, claimed_by=f"compensation:{task.pk}:elsewhere",
        claimed_until=timezone.now() + timedelta(seconds=60))

    assert compensate_task(task.pk) == 0
    assert not DemoNotification.objects.filter(customer="undo").exists()
    # Not cleared: should that run die, the sweep hands the task out again.
    assert Task.objects.get(pk=task.pk).compensation_due_at is not None
