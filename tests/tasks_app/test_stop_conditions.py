"""Stop conditions: no progress (both signals), every budget dimension with
`fail` and with `escalate` + resume, the deadline, retries used up, a
permission error, and illegal transitions through the services."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals_app.services.answers import task_provide_input
from foundations.actors import SYSTEM
from foundations.errors import DomainError, ErrorKind
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, StepStatus, Task
from tasks_app.runner.recovery import recovery_sweep
from tasks_app.services.tasks import task_cancel, task_fail_by_operator, task_resume
from tests.factories import actor_of, submit
from tests.fakes import python_tools
from tests.fakes.runtime import add_agent, add_tool, assert_log_consistent, events_of
from tests.helpers import drive
from tools_app.models import ToolExecution

pytestmark = pytest.mark.django_db(transaction=True)

LOOKUP = "lookup_order"


def lookup(order_id: str) -> dict:
    return {"tool": LOOKUP, "args": {"order_id": order_id}}


def _agent(world, mode: str, **fields):  # type: ignore[no-untyped-def]
    add_agent(world.tenant, "bounded", [LOOKUP], on_exhaustion=mode, **fields)


def _operator(world):  # type: ignore[no-untyped-def]
    return actor_of(world.users["operator"])


# --- no progress -------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fail", "escalate"])
def test_the_same_call_repeated_too_often_stops_the_task(world, mode):
    _agent(world, mode, no_progress_repeats=2, no_progress_window=50)
    task = submit(world.tenant, [lookup("A-1"), lookup("A-1"), lookup("A-1"), {"final": {"x": 1}}],
                  agent="bounded")
    task = drive(task.pk)

    refused = Step.objects.get(task=task, step_no=3)
    assert refused.status == StepStatus.FAILED and refused.error["signal"] == "repeated_call"
    assert not ToolExecution.objects.filter(step_id=refused.pk).exists()  # the third call never ran
    assert (task.steps_count, task.tool_calls) == (3, 2)
    if mode == "fail":
        assert task.status == TaskStatus.FAILED and task.failure_reason == "no_progress"
        assert task.failure_detail["detail"]["signal"] == "repeated_call"
    else:
        assert task.status == TaskStatus.WAITING_FOR_HUMAN
        assert events_of(task.pk, "escalated")[-1].payload["reason"] == "no_progress"
        task_resume(task_id=task.pk, actor=_operator(world), comment="try something else")
        task = drive(task.pk)
        assert task.status == TaskStatus.SUCCEEDED and task.result == {"x": 1}
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("mode", ["fail", "escalate"])
def test_steps_that_observe_nothing_new_stop_the_task(world, mode):
    _agent(world, mode, no_progress_repeats=10, no_progress_window=3)
    # alternating calls: never the same call twice in a row, but nothing new after step 2
    script = [lookup("A-1"), lookup("A-2")] * 4 + [{"final": {"done": True}}]
    task = submit(world.tenant, script, agent="bounded")
    task = drive(task.pk)

    assert task.tool_calls == 5  # steps 3, 4, 5 repeat what steps 1, 2 saw
    assert task.stale_steps == 3
    if mode == "fail":
        assert task.status == TaskStatus.FAILED and task.failure_reason == "no_progress"
        assert task.failure_detail["detail"] == {"signal": "no_new_observation"}
    else:
        assert task.status == TaskStatus.WAITING_FOR_HUMAN
        task_resume(task_id=task.pk, actor=_operator(world))
        assert Task.objects.get(pk=task.pk).stale_steps == 0
        task = drive(task.pk)
        # three more stale steps after the resume, then the stop again
        assert task.status == TaskStatus.WAITING_FOR_HUMAN and task.tool_calls == 8
    assert_log_consistent(task.pk)


def test_repeated_invalid_decisions_count_as_no_progress(world):
    _agent(world, "fail", no_progress_window=2)
    task = submit(world.tenant, [{"invalid": "garbage"}] * 5, agent="bounded")
    task = drive(task.pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "no_progress"
    assert task.steps_count == 3  # the first is new, the next two repeat it


# --- budgets -------------------------------------------------------------------------

THREE = [lookup("A-1"), lookup("A-2"), {"final": {"ok": True}}]
BUDGETS = {
    # dimension: (profile fields, extension on resume, steps done when it stops)
    "max_steps": ({"max_steps": 2}, {"max_steps": 1}),
    "max_model_calls": ({"max_model_calls": 2}, {"max_model_calls": 1}),
    "max_tool_calls": ({"max_tool_calls": 1}, {"max_tool_calls": 1}),
    # each scripted lookup costs 13 tokens: the third model call is refused
    "max_tokens": ({"max_tokens": 20}, {"max_tokens": 100}),
    "per_tool_limit": ({"per_tool": {LOOKUP: 1}}, {"per_tool": {LOOKUP: 1}}),
}


@pytest.mark.parametrize("budget", list(BUDGETS))
def test_a_used_up_budget_fails_the_task(world, budget):
    fields, _ = BUDGETS[budget]
    _agent(world, "fail", **fields)
    task = drive(submit(world.tenant, THREE, agent="bounded").pk)

    assert task.status == TaskStatus.FAILED and task.failure_reason == budget
    (stop,) = events_of(task.pk, "budget_exhausted")
    assert stop.payload["reason"] == budget
    assert task.failure_detail["usage"]["tool_calls"] == task.tool_calls
    assert task.result is None
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("budget", list(BUDGETS))
def test_a_used_up_budget_escalates_and_a_resume_with_an_extension_continues(world, budget):
    fields, extension = BUDGETS[budget]
    _agent(world, "escalate", **fields)
    task = drive(submit(world.tenant, THREE, agent="bounded").pk)
    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    assert events_of(task.pk, "escalated")[-1].payload["reason"] == budget

    # a resume without an extension stops again at once
    task_resume(task_id=task.pk, actor=_operator(world))
    task = drive(task.pk)
    assert task.status == TaskStatus.WAITING_FOR_HUMAN

    done = task_resume(task_id=task.pk, actor=_operator(world), extend=extension, comment="go on")
    (resumed,) = [e for e in events_of(task.pk, "resumed") if e.task_version == done.version]
    assert resumed.payload["extend"] == extension
    assert resumed.actor == world.users["operator"].username
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED and task.result == {"ok": True}
    # the refused call was not lost: both lookups ran
    outputs = [s.output["order_id"] for s in Step.objects.filter(task=task, tool=LOOKUP)
               if s.status == StepStatus.SUCCEEDED]
    assert outputs == ["A-1", "A-2"]
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("mode", ["fail", "escalate"])
def test_max_duration(world, mode):
    _agent(world, mode, max_duration_s=60)
    task = submit(world.tenant, THREE, agent="bounded")
    now = timezone.now()
    # test setup: the task started long ago; its deadline is not what is tested here
    Task.objects.filter(pk=task.pk).update(started_at=now - timedelta(seconds=120),
                                           deadline_at=now + timedelta(hours=1))
    task = drive(task.pk)
    assert task.steps_count == 0
    if mode == "fail":
        assert task.status == TaskStatus.FAILED and task.failure_reason == "max_duration_s"
    else:
        assert task.status == TaskStatus.WAITING_FOR_HUMAN
        task_resume(task_id=task.pk, actor=_operator(world), extend={"max_duration_s": 3600})
        task = drive(task.pk)
        assert task.status == TaskStatus.SUCCEEDED
    assert_log_consistent(task.pk)


def test_a_task_may_still_answer_when_its_tool_calls_are_used_up(world):
    _agent(world, "fail", max_tool_calls=1)
    task = drive(submit(world.tenant, [lookup("A-1"), {"final": {"ok": 1}}], agent="bounded").pk)
    assert task.status == TaskStatus.SUCCEEDED


@pytest.mark.parametrize("extend", [
    {"max_steps": -1}, {"max_steps": "10"}, {"max_steps": 1.5}, {"max_steps": True},
    {"bogus": 1}, {"per_tool": 3}, {"per_tool": {LOOKUP: -1}}, "more",
])
def test_a_bad_extension_is_refused_and_changes_nothing(world, extend):
    _agent(world, "escalate", max_steps=1)
    task = drive(submit(world.tenant, THREE, agent="bounded").pk)
    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    with pytest.raises(DomainError) as refused:
        task_resume(task_id=task.pk, actor=_operator(world), extend=extend)
    assert refused.value.kind == ErrorKind.INVALID and "extend" in refused.value.details
    after = Task.objects.get(pk=task.pk)
    assert (after.status, after.version, after.budget_extension) == (
        TaskStatus.WAITING_FOR_HUMAN, task.version, {})


# --- the deadline ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fail", "escalate"])
def test_the_deadline(world, mode):
    _agent(world, mode)
    task = submit(world.tenant, THREE, agent="bounded")
    Task.objects.filter(pk=task.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))
    task = drive(task.pk)
    if mode == "fail":
        assert task.status == TaskStatus.FAILED and task.failure_reason == "deadline"
        (stop,) = events_of(task.pk, "deadline_exceeded")
        assert stop.payload["reason"] == "deadline"
    else:
        assert task.status == TaskStatus.WAITING_FOR_HUMAN
        deadline = task.deadline_at
        task_resume(task_id=task.pk, actor=_operator(world), extend={"max_duration_s": 600})
        assert Task.objects.get(pk=task.pk).deadline_at == deadline + timedelta(seconds=600)
        task = drive(task.pk)
        assert task.status == TaskStatus.SUCCEEDED
    assert_log_consistent(task.pk)


def test_a_task_waiting_for_an_answer_past_its_deadline_fails(world):
    task = drive(submit(world.tenant, [{"ask": "Which order?"}, {"final": {}}]).pk)
    assert task.status == TaskStatus.WAITING_FOR_INPUT
    assert recovery_sweep().deadlines_failed == 0  # not yet due
    Task.objects.filter(pk=task.pk).update(deadline_at=timezone.now() - timedelta(seconds=1))

    assert recovery_sweep().deadlines_failed == 1
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "deadline"
    assert task.questions.get().status == "canceled"
    with pytest.raises(DomainError):
        task_provide_input(task_id=task.pk, answer="A-1", actor=SYSTEM)
    assert_log_consistent(task.pk)


# --- errors that stop a task ----------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fail", "escalate"])
def test_retries_used_up(world, mode):
    add_tool(world.tenant, "shaky", "always_transient", max_retries=2)
    add_agent(world.tenant, "bounded", ["shaky"], on_exhaustion=mode)
    task = drive(submit(world.tenant, [{"tool": "shaky", "args": {}}, {"final": {}}],
                        agent="bounded").pk)
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.attempt == 2
    assert step.error["type"] == "transient"
    assert python_tools.CALLS[step.idempotency_key] == 3  # the first call and two retries
    assert [e.payload["attempt"] for e in events_of(task.pk, "retryable_error")] == [1, 2]
    assert len(ToolExecution.objects.get(idempotency_key=step.idempotency_key).attempts) == 3
    if mode == "fail":
        assert task.status == TaskStatus.FAILED and task.failure_reason == "retries_exhausted"
    else:
        assert task.status == TaskStatus.WAITING_FOR_HUMAN
        task_resume(task_id=task.pk, actor=_operator(world))
        assert drive(task.pk).status == TaskStatus.SUCCEEDED
    assert_log_consistent(task.pk)


def test_a_permission_error_stops_the_task_without_retrying(world):
    add_tool(world.tenant, "guarded", "deny", max_retries=3)
    add_agent(world.tenant, "bounded", ["guarded"], on_exhaustion="escalate")
    task = drive(submit(world.tenant, [{"tool": "guarded", "args": {}}, {"final": {}}],
                        agent="bounded").pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["type"] == "permission"
    assert step.error["scope"] == "refunds"
    assert python_tools.CALLS[step.idempotency_key] == 1
    assert task.failure_detail["detail"]["type"] == "permission"
    assert_log_consistent(task.pk)


# --- illegal transitions through the services ----------------------------------------------


def _frozen(task_id: int) -> tuple:
    task = Task.objects.get(pk=task_id)
    return (task.status, task.version, task.failure_reason, task.result,
            Event.objects.filter(task_id=task_id).count(),
            list(Step.objects.filter(task_id=task_id).values_list("status", flat=True)))


def test_canceling_a_finished_task_is_a_conflict_and_changes_nothing(world):
    task = drive(submit(world.tenant, [lookup("A-1"), {"final": {"ok": True}}]).pk)
    before = _frozen(task.pk)
    with pytest.raises(DomainError) as refused:
        task_cancel(task_id=task.pk, actor=_operator(world), reason="too late")
    assert refused.value.kind == ErrorKind.CONFLICT and refused.value.code == "illegal_transition"
    assert _frozen(task.pk) == before


@pytest.mark.parametrize("action", ["resume", "input", "fail", "cancel_stale"])
def test_human_actions_that_do_not_fit_the_state_change_nothing(world, action):
    task = drive(submit(world.tenant, [{"ask": "Which order?"}, {"final": {}}]).pk)
    assert task.status == TaskStatus.WAITING_FOR_INPUT
    if action == "input":  # a running task asks nothing
        task = drive(submit(world.tenant, [lookup("A-1"), lookup("A-2"), {"final": {}}]).pk)
        Task.objects.filter(pk=task.pk).update(status=TaskStatus.RUNNING)
    before = _frozen(task.pk)
    with pytest.raises(DomainError) as refused:
        if action == "resume":
            task_resume(task_id=task.pk, actor=_operator(world))
        elif action == "input":
            task_provide_input(task_id=task.pk, answer="A-1", actor=SYSTEM)
        elif action == "fail":
            task_fail_by_operator(task_id=task.pk, actor=_operator(world), expected_version=1)
        else:
            task_cancel(task_id=task.pk, actor=_operator(world), expected_version=task.version - 1)
    assert refused.value.kind == ErrorKind.CONFLICT
    assert _frozen(task.pk) == before
