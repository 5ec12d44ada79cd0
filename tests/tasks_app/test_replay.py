"""Replaying a task's events rebuilds its state; the check finds tampering."""
from __future__ import annotations

import pytest

from approvals_app.models import Approval, Reconciliation
from approvals_app.services.answers import task_provide_input
from approvals_app.services.decisions import approval_decide, reconciliation_resolve
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.services.replay import task_replay, task_replay_check
from tasks_app.services.tasks import task_cancel, task_resume
from tests.factories import actor_of, submit
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 100}}
LOOKUP = {"tool": "lookup_order", "args": {"order_id": "A-1"}}


def _assert_replays(task_id: int) -> None:
    task = Task.objects.get(pk=task_id)
    replayed = task_replay(task_id)
    assert (replayed.status, replayed.version) == (task.status, task.version)
    assert (replayed.steps, replayed.tool_calls) == (task.steps_count, task.tool_calls)
    assert replayed.transitions == task.version and replayed.problems == ()
    assert task_replay_check(task_id) == []


def _success(world):  # type: ignore[no-untyped-def]
    return drive(submit(world.tenant, [LOOKUP, {"invalid": "oops"}, {"final": {"ok": 1}}]).pk)


def _canceled(world):  # type: ignore[no-untyped-def]
    task = drive(submit(world.tenant, [{"ask": "Which order?"}, {"final": {}}]).pk)
    task_cancel(task_id=task.pk, actor=SYSTEM, reason="no longer needed")
    return task


def _approvals(world):  # type: ignore[no-untyped-def]
    reviewer = actor_of(world.users["reviewer"])
    task = drive(submit(world.tenant, [REFUND, REFUND, {**REFUND, "args": {"order_id": "A-2",
                                                                           "amount_cents": 1}},
                                       {"final": {}}]).pk)
    for decision, extra in (("reject", {"comment": "no"}), ("respond", {"output": {"r": 1}}),
                            ("approve", {})):
        approval = Approval.objects.get(task_id=task.pk, status="pending")
        approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=reviewer,
                        decision=decision, **extra)
        task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    return task


def _reconciled(world):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "notify_blind", "tools_app.demo.tools.notify_customer",
             side_effect="write",
             timeout_s=1.0, max_retries=0)
    add_agent(world.tenant, "blind", ["notify_blind"])
    task = drive(submit(world.tenant, [
        {"tool": "notify_blind", "args": {"customer": "Ada", "message": "hi"}}, {"final": {}}],
        agent="blind").pk)
    rec = Reconciliation.objects.get(task_id=task.pk)
    reconciliation_resolve(reconciliation_id=rec.pk, tenant_id=world.tenant.pk,
                           actor=actor_of(world.users["reviewer"]), outcome="failed",
                           comment="not sent")
    return drive(task.pk)


def _answered_and_escalated(world):  # type: ignore[no-untyped-def]
    add_agent(world.tenant, "short", ["lookup_order"], on_exhaustion="escalate", max_steps=2)
    task = drive(submit(world.tenant, [{"ask": "Which order?"}, LOOKUP, {"final": {}}],
                        agent="short").pk)
    task_provide_input(task_id=task.pk, answer="A-1", actor=SYSTEM)
    task = drive(task.pk)
    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    task_resume(task_id=task.pk, actor=SYSTEM, extend={"max_steps": 5})
    return drive(task.pk)


@pytest.mark.parametrize("scenario", [_success, _canceled, _approvals, _reconciled,
                                      _answered_and_escalated])
def test_replay_equals_the_stored_state(world, scenario):
    task = scenario(world)
    _assert_replays(task.pk)


@pytest.mark.parametrize(("tamper", "expected"), [
    (lambda t: Task.objects.filter(pk=t.pk).update(status=TaskStatus.RUNNING), "status"),
    (lambda t: Task.objects.filter(pk=t.pk).update(version=t.version + 1), "version"),
    (lambda t: Task.objects.filter(pk=t.pk).update(tool_calls=0), "tool_calls"),
    (lambda t: Task.objects.filter(pk=t.pk).update(result={"forged": True}), "result"),
    (lambda t: Step.objects.filter(task=t, step_no=2).delete(), "step rows"),
    (lambda t: Event.objects.filter(task=t, type="step_succeeded").delete(), "version"),
    (lambda t: Event.objects.filter(task=t, type="final_accepted").update(
        payload={"from": "RUNNING", "to": "FAILED"}), "the table says"),
])
def test_a_tampered_task_is_detected(world, tamper, expected):
    task = _success(world)
    assert task_replay_check(task.pk) == []
    tamper(task)
    problems = task_replay_check(task.pk)
    assert problems and any(expected in p for p in problems), problems
