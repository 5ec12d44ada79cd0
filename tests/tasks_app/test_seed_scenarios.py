"""Seed 000's five tests: normal completion, a failed validation then a retry,
a write tool called twice for one step, cancel during a slow tool, and two
executors advancing one task at once."""
from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from foundations.actors import SYSTEM
from tasks_app.context.builder import build_context
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepKind, StepStatus, Task
from tasks_app.runner.step import Next
from tasks_app.services.tasks import task_cancel
from tasks_app.snapshot import TaskSnapshot
from tests.factories import submit
from tests.fakes import python_tools
from tests.fakes.runtime import (
    InThread,
    add_agent,
    add_tool,
    advance,
    assert_log_consistent,
    events_of,
    transition_events,
)
from tests.helpers import drive, wait_for
from tools_app.models import DemoNotification, DemoRefund, ToolExecution
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db(transaction=True)


def test_normal_completion(world):
    task = submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "A-1"}, "reason": "need the amount"},
        {"final": {"refundable_cents": 5000}},
    ])
    task = drive(task.pk)

    assert task.status == TaskStatus.SUCCEEDED
    assert task.result == {"refundable_cents": 5000}
    assert (task.steps_count, task.model_calls, task.tool_calls) == (2, 2, 1)
    lookup, final = Step.objects.filter(task=task).order_by("step_no")
    assert (lookup.kind, lookup.status, lookup.attempt) == (StepKind.TOOL, StepStatus.SUCCEEDED, 0)
    assert lookup.output["amount_cents"] == 5000
    assert (final.kind, final.status, final.output) == (StepKind.FINAL, StepStatus.SUCCEEDED,
                                                        {"refundable_cents": 5000})
    ledger = ToolExecution.objects.get(idempotency_key=lookup.idempotency_key)
    assert (ledger.status, len(ledger.attempts)) == ("SUCCEEDED", 1)
    assert [e.type for e in events_of(task.pk)] == [
        "task_created", "task_started", "decision_recorded", "step_succeeded", "final_accepted"]
    assert_log_consistent(task.pk)


def test_a_schema_invalid_decision_is_fed_back_and_the_retry_succeeds(world):
    task = submit(world.tenant, [
        {"tool": "lookup_order", "args": {"order_id": "lower case!", "extra": 1}},
        {"tool": "lookup_order", "args": {"order_id": "A-2"}},
        {"final": {"amount_cents": 1200}},
    ])
    assert advance(task.pk).next is Next.CONTINUE

    bad = Step.objects.get(task=task, step_no=1)
    assert (bad.kind, bad.status) == (StepKind.INVALID, StepStatus.FAILED)
    assert bad.error["type"] == "invalid_arguments"
    assert any("order_id" in e for e in bad.error["errors"])
    assert not ToolExecution.objects.filter(task_id=task.pk).exists()  # no tool ran
    (event,) = events_of(task.pk, "invalid_decision")
    assert event.payload["step_no"] == 1 and event.payload["error"]["type"] == "invalid_arguments"
    task = Task.objects.get(pk=task.pk)
    assert (task.status, task.steps_count, task.model_calls, task.tool_calls) == (
        TaskStatus.RUNNING, 1, 1, 0)

    # what the model sees for its next decision: the error, verbatim
    context = build_context(TaskSnapshot.of(task), tools=tool_specs(tenant_id=world.tenant.pk))
    (seen,) = context.window
    assert seen["step_no"] == 1 and seen["status"] == StepStatus.FAILED
    assert seen["error"]["type"] == "invalid_arguments"

    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED and task.result == {"amount_cents": 1200}
    retry = Step.objects.get(task=task, step_no=2)
    assert retry.status == StepStatus.SUCCEEDED and retry.output["order_id"] == "A-2"
    assert_log_consistent(task.pk)


def _refund_agent(world, tool: str, target: str, **fields):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, tool, target, side_effect="idempotent_write", **fields)
    add_agent(world.tenant, "refunder", [tool, "lookup_order"])


def test_a_write_retried_after_a_transient_error_has_one_effect(world):
    _refund_agent(world, "refund_flaky", "flaky_refund", max_retries=2)
    task = submit(world.tenant, [
        {"tool": "refund_flaky", "args": {"order_id": "A-1", "amount_cents": 1000}},
        {"final": {"refunded": 1000}},
    ], agent="refunder")
    task = drive(task.pk)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert (step.status, step.attempt) == (StepStatus.SUCCEEDED, 1)
    assert python_tools.CALLS[step.idempotency_key] == 2  # really called twice ...
    # ... and one refund
    assert DemoRefund.objects.filter(idempotency_key=step.idempotency_key).count() == 1
    assert DemoRefund.objects.count() == 1
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == "SUCCEEDED"
    assert [a["outcome"] for a in ledger.attempts] == ["transient", "ok"]
    assert len(events_of(task.pk, "retryable_error")) == 1
    assert_log_consistent(task.pk)


def _executor_a_inside(task: Task, gate: python_tools.Gate) -> tuple[InThread, Step]:
    """Executor A runs the task's first step and is inside its (gated) tool."""
    a = InThread(lambda: advance(task.pk, owner="executor-a"))
    wait_for(lambda: gate.entries == 1, message="executor A inside the tool")
    return a, Step.objects.get(task=task, step_no=1)


@pytest.mark.parametrize("claim", ["ended", "held"])
def test_a_write_run_by_two_executors_for_one_step_has_one_effect(world, claim):
    """Executor A's lease ended while its call hangs (its claim too, or not yet);
    executor B runs the same step with the same key, at once: the downstream
    dedups by key, so both calls reach it and it applies one."""
    _refund_agent(world, "refund_slow", "blocking_refund", timeout_s=30)
    task = submit(world.tenant, [
        {"tool": "refund_slow", "args": {"order_id": "A-1", "amount_cents": 700, "gate": "g"}},
        {"final": {"refunded": 700}},
    ], agent="refunder")
    gate = python_tools.gate("g")
    a, step = _executor_a_inside(task, gate)
    if claim == "ended":
        ToolExecution.objects.filter(idempotency_key=step.idempotency_key).update(
            claimed_until="2000-01-01T00:00:00Z")  # A looks dead to everybody else
    b = InThread(lambda: advance(task.pk, owner="executor-b"))
    wait_for(lambda: gate.entries == 2, message="executor B inside the tool")
    gate.release.set()
    results = {a.join().next, b.join().next}

    assert results == {Next.CONTINUE}  # the loser re-reads and moves on; nothing escaped
    assert python_tools.CALLS[step.idempotency_key] == 2
    assert DemoRefund.objects.filter(idempotency_key=step.idempotency_key).count() == 1
    assert len([e for e in events_of(task.pk, "step_succeeded") if e.payload["step_no"] == 1]) == 1
    (discarded,) = events_of(task.pk, "result_discarded")
    assert discarded.payload["duplicate"] is True
    step.refresh_from_db()
    assert step.status == StepStatus.SUCCEEDED and step.late_output is None

    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED and task.tool_calls == 1
    assert DemoRefund.objects.count() == 1
    assert_log_consistent(task.pk)


def _slow_note_task(world, gate_name: str,  # type: ignore[no-untyped-def]
                    **fields) -> tuple[Task, python_tools.Gate]:
    """A task whose first step is a plain write (30 s timeout) that waits on a gate."""
    add_tool(world.tenant, "slow_note", "blocking_note", side_effect="write", timeout_s=30,
             **fields)
    add_agent(world.tenant, "notifier", ["slow_note"])
    task = submit(world.tenant, [
        {"tool": "slow_note", "args": {"to": "Ada", "text": "hello", "gate": gate_name}},
        {"final": {"sent": True}},
    ], agent="notifier")
    return task, python_tools.gate(gate_name)


@pytest.mark.parametrize(("left_s", "wait_s"), [(35, 5), (10, 10)])
def test_a_plain_write_another_executor_holds_is_waited_for_longer_each_time(world, left_s,
                                                                             wait_s):
    """Executor A is inside a plain write (a claim of 30 s timeout + 10 s grace);
    B, running the same step (A's lease ended), must not call: it comes back
    after as long as A's claim has lasted so far, at the latest when the claim
    ends, not every half second."""
    task, gate = _slow_note_task(world, "h")
    a, step = _executor_a_inside(task, gate)
    ToolExecution.objects.filter(idempotency_key=step.idempotency_key).update(
        claimed_until=timezone.now() + timedelta(seconds=left_s))  # it has lasted 40 - left_s
    b = advance(task.pk, owner="executor-b")

    assert b.next is Next.LATER and b.note == "another executor holds this call"
    assert wait_s - 1 <= b.delay_s <= wait_s + 1
    assert gate.entries == 1  # B did not call
    gate.release.set()
    assert a.join().next is Next.CONTINUE
    assert DemoNotification.objects.filter(idempotency_key=step.idempotency_key).count() == 1


def test_cancel_during_a_slow_tool_discards_its_late_result(world):
    task, gate = _slow_note_task(world, "slow", max_retries=0)
    late_before = REGISTRY.get_sample_value("tether_late_results_discarded_total") or 0

    runner = InThread(lambda: advance(task.pk, owner="executor-a"))
    wait_for(lambda: gate.entries == 1, message="the tool to start")
    task_cancel(task_id=task.pk, actor=SYSTEM, reason="customer withdrew")
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.DISCARDED and step.error["type"] == "canceled"
    version_at_cancel = Task.objects.get(pk=task.pk).version

    gate.release.set()  # the provider answers, too late
    assert runner.join().next is Next.CONTINUE  # no exception escaped the runner

    task = Task.objects.get(pk=task.pk)
    step.refresh_from_db()
    assert task.status == TaskStatus.CANCELED and task.result is None
    assert task.version == version_at_cancel and task.tool_calls == 0
    assert step.status == StepStatus.DISCARDED
    assert step.output is None
    assert step.late_output["kind"] == "ok" and "note_id" in step.late_output["result"]
    (discarded,) = events_of(task.pk, "result_discarded")
    assert discarded.payload["step_no"] == 1
    assert discarded.payload["task_status"] == TaskStatus.CANCELED
    assert REGISTRY.get_sample_value("tether_late_results_discarded_total") == late_before + 1
    assert not events_of(task.pk, "step_succeeded", "final_accepted")
    # the ledger tells the truth about the downstream effect, for audit and reconciliation
    assert ToolExecution.objects.get(idempotency_key=step.idempotency_key).status == "SUCCEEDED"
    # and the runner never takes the task up again
    assert advance(task.pk).next is Next.STOP
    assert Task.objects.get(pk=task.pk).version == version_at_cancel
    assert_log_consistent(task.pk)


def _race_script(n: int) -> list[dict]:
    script = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            script.append({"tool": "echo", "args": {"i": i}})
        elif kind == 1:
            script.append({"tool": "note", "args": {"to": f"c{i}", "text": f"message {i}"}})
        else:
            script.append({"tool": "refund_now", "args": {"order_id": "A-1", "amount_cents": i}})
    return [*script, {"final": {"calls": n}}]


def _executor(task_id: int, owner: str, deadline: float) -> int:
    """Advance until the task stops running, politely waiting out "come back later"."""
    steps = 0
    while time.monotonic() < deadline:
        seen = Task.objects.filter(pk=task_id).values_list("version", flat=True).first()
        result = advance(task_id, owner=owner)
        steps += 1
        if result.next is Next.STOP and Task.objects.get(pk=task_id).status != TaskStatus.RUNNING:
            return steps
        if result.next is Next.LATER:
            until = time.monotonic() + min(result.delay_s, 1.0)

            def due(until: float = until, seen: int | None = seen) -> bool:
                version = Task.objects.filter(pk=task_id).values_list("version", flat=True).first()
                return time.monotonic() >= until or version != seen

            wait_for(due, timeout=5, interval=0.01)
    raise AssertionError(f"{owner} did not finish")


def test_two_executors_advancing_one_task_at_once(world):
    add_tool(world.tenant, "echo", "echo")
    add_tool(world.tenant, "note", "note", side_effect="write", max_retries=0,
             status_tool="tests.fakes.python_tools.note_status")
    add_tool(world.tenant, "refund_now", "tools_app.demo.tools.issue_refund",
             side_effect="idempotent_write")
    add_agent(world.tenant, "racer", ["echo", "note", "refund_now"], max_steps=100)
    calls = 30
    task = submit(world.tenant, _race_script(calls), agent="racer")
    deadline = time.monotonic() + 90

    a = InThread(lambda: _executor(task.pk, "executor-a", deadline), name="executor-a")
    b = InThread(lambda: _executor(task.pk, "executor-b", deadline), name="executor-b")
    a.join(120)
    b.join(120)

    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.SUCCEEDED and task.result == {"calls": calls}
    # exactly one transition per version, 1..N, none twice
    versions = [e.task_version for e in transition_events(task.pk)]
    assert versions == list(range(1, task.version + 1))
    steps = list(Step.objects.filter(task=task).order_by("step_no"))
    assert [s.step_no for s in steps] == list(range(1, calls + 2))
    assert all(s.status == StepStatus.SUCCEEDED for s in steps)
    assert (task.steps_count, task.tool_calls, task.model_calls) == (calls + 1, calls, calls + 1)
    assert len(events_of(task.pk, "step_succeeded")) == calls
    # no duplicate side effects: one row per key downstream, one per call made
    notes = [s for s in steps if s.tool == "note"]
    refunds = [s for s in steps if s.tool == "refund_now"]
    assert DemoNotification.objects.count() == len(notes) == calls // 3
    assert all(DemoNotification.objects.filter(idempotency_key=s.idempotency_key).count() == 1
               for s in notes)
    assert DemoRefund.objects.count() == len(refunds) == calls // 3
    assert_log_consistent(task.pk)
