"""A write whose outcome is unknown is never replayed blindly: the status query
settles it, or a person reconciles it."""
from __future__ import annotations

import pytest

from approvals_app.models import Reconciliation
from approvals_app.services.decisions import reconciliation_requery, reconciliation_resolve
from foundations.errors import DomainError, ErrorKind
from tasks_app.context.builder import build_context
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, StepStatus, Task
from tasks_app.runner.step import Next
from tasks_app.snapshot import TaskSnapshot
from tests.factories import actor_of, submit
from tests.fakes import python_tools
from tests.fakes.runtime import (
    InThread,
    add_agent,
    add_tool,
    advance,
    assert_log_consistent,
    events_of,
)
from tests.helpers import drive, wait_for
from tools_app.models import DemoNotification, ToolExecution
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db(transaction=True)

NOTIFY = {"tool": "notify_customer", "args": {"customer": "Ada",
                                              "message": "Your refund is on its way."}}


def test_a_timed_out_write_is_settled_by_its_status_query_without_a_replay(world):
    task = drive(submit(world.tenant, [NOTIFY, {"final": {"notified": True}}]).pk)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.SUCCEEDED and step.output["delivered"] is True
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == "SUCCEEDED" and ledger.status_answer["state"] == "succeeded"
    assert [a["outcome"] for a in ledger.attempts] == ["uncertain"]  # called once, never again
    assert not Reconciliation.objects.filter(task=task).exists()
    assert_log_consistent(task.pk)
    # the provider's thread ends later (the fixture waits for it); still one message
    wait_for(lambda: DemoNotification.objects.filter(idempotency_key=step.idempotency_key).exists())
    assert DemoNotification.objects.filter(idempotency_key=step.idempotency_key).count() == 1


def _blind_notify(world) -> Task:  # type: ignore[no-untyped-def]
    """notify_customer registered without its status query."""
    add_tool(world.tenant, "notify_blind", "tools_app.demo.tools.notify_customer",
             side_effect="write", timeout_s=1.0, max_retries=0)
    add_agent(world.tenant, "blind", ["notify_blind"])
    task = submit(world.tenant, [{**NOTIFY, "tool": "notify_blind"}, {"final": {"done": True}}],
                  agent="blind")
    return drive(task.pk)


def test_without_a_status_query_an_uncertain_write_waits_for_reconciliation(world):
    task = _blind_notify(world)

    assert task.status == TaskStatus.WAITING_FOR_RECONCILIATION
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.UNCERTAIN and step.error["type"] == "timeout"
    rec = Reconciliation.objects.get(task=task)
    assert (rec.status, rec.tool, rec.idempotency_key) == ("open", "notify_blind",
                                                           step.idempotency_key)
    assert rec.args == NOTIFY["args"] and rec.status_answer["state"] == "unknown"
    assert rec.task_version == task.version
    assert ToolExecution.objects.get(idempotency_key=step.idempotency_key).status == "UNCERTAIN"
    (uncertain,) = events_of(task.pk, "result_uncertain")
    assert uncertain.payload["status_answer"]["state"] == "unknown"
    # a waiting task is not advanced: the write is not tried again
    assert advance(task.pk).next is Next.STOP
    assert len(ToolExecution.objects.get(idempotency_key=step.idempotency_key).attempts) == 1
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("outcome", ["succeeded", "failed"])
def test_a_reviewer_resolves_the_reconciliation_and_the_task_moves_on(world, outcome):
    task = _blind_notify(world)
    rec = Reconciliation.objects.get(task=task)
    reviewer = actor_of(world.users["reviewer"])
    output = {"notification_id": "nt_from_provider_console", "delivered": True}

    reconciliation_resolve(reconciliation_id=rec.pk, tenant_id=world.tenant.pk, actor=reviewer,
                           outcome=outcome, output=output if outcome == "succeeded" else None,
                           comment="checked the provider's console", expected_version=task.version)

    rec.refresh_from_db()
    assert (rec.status, rec.outcome, rec.resolved_by_id) == ("resolved", outcome, reviewer.user_id)
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.RUNNING and task.tool_calls == 1
    step = Step.objects.get(task=task, step_no=1)
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    (reconciled,) = events_of(task.pk, "reconciled")
    assert reconciled.actor == reviewer.name and reconciled.actor_role == "reviewer"
    assert reconciled.payload["comment"] == "checked the provider's console"
    assert reconciled.payload["evidence"]["state"] == "unknown"
    if outcome == "succeeded":
        assert step.status == StepStatus.SUCCEEDED and step.output == output
        assert ledger.status == "SUCCEEDED" and ledger.result == output
    else:
        assert step.status == StepStatus.FAILED and step.error["type"] == "reconciled_failed"
        assert ledger.status == "FAILED_FINAL"
        # the model is told
        context = build_context(TaskSnapshot.of(task), tools=tool_specs(tenant_id=world.tenant.pk))
        assert context.window[-1]["error"]["type"] == "reconciled_failed"

    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert len(ledger.attempts) == 1  # never replayed
    wait_for(lambda: DemoNotification.objects.filter(idempotency_key=step.idempotency_key).exists())
    assert DemoNotification.objects.filter(idempotency_key=step.idempotency_key).count() == 1
    assert_log_consistent(task.pk)


def test_retry_is_refused_for_a_plain_write_and_changes_nothing(world):
    task = _blind_notify(world)
    rec = Reconciliation.objects.get(task=task)
    events = Event.objects.filter(task=task).count()

    with pytest.raises(DomainError) as refused:
        reconciliation_resolve(reconciliation_id=rec.pk, tenant_id=world.tenant.pk,
                               actor=actor_of(world.users["reviewer"]), outcome="retry",
                               comment="try again")
    assert refused.value.kind == ErrorKind.INVALID and "outcome" in refused.value.details
    rec.refresh_from_db()
    after = Task.objects.get(pk=task.pk)
    assert rec.status == "open"
    assert (after.status, after.version) == (TaskStatus.WAITING_FOR_RECONCILIATION, task.version)
    assert Event.objects.filter(task=task).count() == events
    assert Step.objects.get(task=task, step_no=1).status == StepStatus.UNCERTAIN


@pytest.mark.parametrize(("kwargs", "kind"), [
    ({"outcome": "succeeded", "output": None}, ErrorKind.INVALID),
    ({"outcome": "maybe"}, ErrorKind.INVALID),
    ({"outcome": "failed", "expected_version": 1}, ErrorKind.CONFLICT),
])
def test_bad_resolutions_are_refused(world, kwargs, kind):
    task = _blind_notify(world)
    rec = Reconciliation.objects.get(task=task)
    with pytest.raises(DomainError) as refused:
        reconciliation_resolve(reconciliation_id=rec.pk, tenant_id=world.tenant.pk,
                               actor=actor_of(world.users["reviewer"]), **kwargs)
    assert refused.value.kind == kind
    assert Task.objects.get(pk=task.pk).version == task.version
    rec.refresh_from_db()
    assert rec.status == "open"


def test_a_requery_that_finds_the_effect_resolves_the_reconciliation(world):
    task = _blind_notify(world)
    rec = Reconciliation.objects.get(task=task)
    wait_for(lambda: DemoNotification.objects.filter(idempotency_key=rec.idempotency_key).exists())
    # the admin adds the status query afterwards
    add_tool(world.tenant, "notify_blind", "tools_app.demo.tools.notify_customer",
             side_effect="write",
             timeout_s=1.0, max_retries=0, status_tool="tools_app.demo.tools.notification_status")

    reconciliation_requery(reconciliation_id=rec.pk, tenant_id=world.tenant.pk,
                           actor=actor_of(world.users["reviewer"]))
    rec.refresh_from_db()
    assert rec.status == "resolved" and rec.outcome == "succeeded"
    assert Task.objects.get(pk=task.pk).status == TaskStatus.RUNNING
    assert drive(task.pk).status == TaskStatus.SUCCEEDED


# --- recovery: a call left IN_PROGRESS by an executor that died --------------------------------


def test_a_plain_write_left_in_progress_is_not_replayed(world):
    """Executor A wrote and then hung; its claim expired. Executor B must not call the
    tool again: the ledger makes the step UNCERTAIN and the status query settles it."""
    add_tool(world.tenant, "note_hang", "note_then_block", side_effect="write", timeout_s=30,
             max_retries=0, status_tool="tests.fakes.python_tools.note_status")
    add_agent(world.tenant, "noter", ["note_hang"])
    task = submit(world.tenant, [{"tool": "note_hang", "args": {"to": "Ada", "gate": "h"}},
                                 {"final": {}}], agent="noter")
    gate = python_tools.gate("h")
    a = InThread(lambda: advance(task.pk, owner="executor-a"))
    wait_for(lambda: gate.entries == 1, message="A inside the tool")
    step = Step.objects.get(task=task, step_no=1)
    ToolExecution.objects.filter(idempotency_key=step.idempotency_key).update(
        claimed_until="2000-01-01T00:00:00Z")

    assert advance(task.pk, owner="executor-b").next is Next.CONTINUE
    step.refresh_from_db()
    assert step.status == StepStatus.SUCCEEDED
    assert gate.entries == 1 and python_tools.CALLS[step.idempotency_key] == 1  # B did not call it
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == "SUCCEEDED" and ledger.status_answer["state"] == "succeeded"

    gate.release.set()
    assert a.join().next is Next.CONTINUE  # A's late answer is a fenced duplicate
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    assert DemoNotification.objects.filter(idempotency_key=step.idempotency_key).count() == 1
    assert_log_consistent(task.pk)


def test_a_read_left_in_progress_is_run_again_with_the_same_key(world):
    add_tool(world.tenant, "read_hang", "note_then_block", side_effect="read", timeout_s=30)
    add_agent(world.tenant, "reader", ["read_hang"])
    task = submit(world.tenant, [{"tool": "read_hang", "args": {"gate": "r"}}, {"final": {}}],
                  agent="reader")
    gate = python_tools.gate("r")
    a = InThread(lambda: advance(task.pk, owner="executor-a"))
    wait_for(lambda: gate.entries == 1)
    step = Step.objects.get(task=task, step_no=1)
    ToolExecution.objects.filter(idempotency_key=step.idempotency_key).update(
        claimed_until="2000-01-01T00:00:00Z")
    b = InThread(lambda: advance(task.pk, owner="executor-b"))
    wait_for(lambda: gate.entries == 2, message="B calling the read again")
    gate.release.set()
    a.join()
    b.join()
    assert python_tools.CALLS[step.idempotency_key] == 2
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    assert_log_consistent(task.pk)
