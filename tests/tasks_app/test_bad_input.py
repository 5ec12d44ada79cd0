"""Bad input from the model or from tools: each becomes a structured error on a
step and an event; nothing is half-written and no exception leaves the runner."""
from __future__ import annotations

import socket

import pytest

from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepKind, StepStatus, Task
from tasks_app.runner.step import Next
from tests.factories import submit
from tests.fakes.runtime import add_agent, add_tool, advance, assert_log_consistent, events_of
from tests.helpers import drive
from tools_app.models import ToolExecution

pytestmark = pytest.mark.django_db(transaction=True)

FINAL = {"final": {"recovered": True}}


@pytest.mark.parametrize(("decision", "error_type"), [
    ({"tool": 5}, "invalid_decision"),
    ({"tool": ""}, "invalid_decision"),
    ({"invalid": "garbage"}, "invalid_decision"),
    ({}, "invalid_decision"),
    ("just words", "invalid_decision"),
    (["a", "list"], "invalid_decision"),
    ({"tool": "lookup_order", "args": "A-1"}, "invalid_decision"),
    ({"tool": "lookup_order", "args": {"order_id": "A-1"}, "cites": "not-a-list"},
     "invalid_decision"),
    ({"ask": ""}, "invalid_decision"),
    ({"final": None}, "invalid_result"),
    ({"tool": "no_such_tool", "args": {}}, "unknown_tool"),
    ({"tool": "t" * 300, "args": {}}, "unknown_tool"),
    ({"tool": "lookup_order", "args": {}}, "invalid_arguments"),
    ({"tool": "lookup_order", "args": {"order_id": 7}}, "invalid_arguments"),
])
def test_a_bad_decision_becomes_an_invalid_step_and_the_task_goes_on(world, decision, error_type):
    task = submit(world.tenant, [decision, FINAL])
    assert advance(task.pk).next is Next.CONTINUE

    step = Step.objects.get(task=task, step_no=1)
    assert (step.kind, step.status) == (StepKind.INVALID, StepStatus.FAILED)
    assert step.error["type"] == error_type
    assert step.error.get("message")
    (event,) = events_of(task.pk, "invalid_decision")
    assert event.payload["error"]["type"] == error_type
    assert not ToolExecution.objects.filter(task_id=task.pk).exists()
    task = Task.objects.get(pk=task.pk)
    assert (task.status, task.steps_count, task.tool_calls) == (TaskStatus.RUNNING, 1, 0)

    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED and task.result == {"recovered": True}
    assert_log_consistent(task.pk)


def test_a_final_result_failing_the_profile_schema_is_refused(world):
    add_agent(world.tenant, "strict", ["lookup_order"], result_schema={
        "type": "object", "required": ["amount"], "properties": {"amount": {"type": "integer"}}})
    task = drive(submit(world.tenant, [{"final": {"amount": "lots"}}, {"final": {"amount": 3}}],
                        agent="strict").pk)
    assert task.status == TaskStatus.SUCCEEDED and task.result == {"amount": 3}
    refused = Step.objects.get(task=task, step_no=1)
    assert refused.error["type"] == "invalid_result" and refused.error["errors"]


def _one_tool_task(world, target: str, **tool_fields):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "odd", target, **tool_fields)
    add_agent(world.tenant, "oddball", ["odd"])
    return submit(world.tenant, [{"tool": "odd", "args": {"size": 5000}}, FINAL], agent="oddball")


@pytest.mark.parametrize(("target", "error_type"), [
    ("returns_object", "invalid_result"),
    ("returns_nan", "invalid_result"),
    ("returns_nul", "invalid_result"),
    ("returns_big", "result_too_large"),
    ("business_error", "business"),
    ("crashes", "tool_crashed"),
    ("tests.fakes.python_tools.no_such_function", None),
])
def test_a_bad_tool_result_becomes_a_structured_error(world, settings, target, error_type):
    settings.TETHER = {**settings.TETHER, "MAX_TOOL_RESULT_BYTES": 1000}
    task = _one_tool_task(world, target)
    assert advance(task.pk).next in (Next.CONTINUE, Next.STOP)

    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.output is None
    ledger = ToolExecution.objects.get(idempotency_key=step.idempotency_key)
    assert ledger.status == "FAILED_FINAL" and ledger.result is None
    if error_type is None:  # the tool cannot even be loaded: the task stops
        assert step.error["type"] == "tool_unavailable"
        assert Task.objects.get(pk=task.pk).status == TaskStatus.FAILED
        return
    assert step.error["type"] == error_type
    (event,) = events_of(task.pk, "step_succeeded")
    assert event.payload["step_status"] == StepStatus.FAILED
    assert event.payload["error"]["type"] == error_type
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert_log_consistent(task.pk)


def test_a_result_exactly_at_the_limit_is_accepted(world, settings):
    import json

    settings.TETHER = {**settings.TETHER,
                       "MAX_TOOL_RESULT_BYTES": len(json.dumps({"blob": "x" * 5000}))}
    task = drive(_one_tool_task(world, "returns_big").pk)
    assert Step.objects.get(task=task, step_no=1).status == StepStatus.SUCCEEDED


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("side_effect", ["read", "write"])
def test_an_http_tool_whose_url_refuses_connections(world, side_effect):
    add_tool(world.tenant, "offline", kind="http", url=f"http://127.0.0.1:{_closed_port()}/call",
             side_effect=side_effect, max_retries=1, timeout_s=2)
    add_agent(world.tenant, "caller", ["offline"])
    task = drive(submit(world.tenant, [{"tool": "offline", "args": {}}, FINAL], agent="caller").pk)

    # nothing was ever sent, so even a plain write is retried, then the task stops
    assert task.status == TaskStatus.FAILED and task.failure_reason == "retries_exhausted"
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["type"] == "connect_error"
    assert step.attempt == 1 and len(events_of(task.pk, "retryable_error")) == 1
    assert task.failure_detail["detail"]["type"] == "connect_error"
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "not a url", ""])
def test_an_http_tool_with_an_unusable_url_stops_the_task(world, url):
    add_tool(world.tenant, "broken", kind="http", url=url, max_retries=3)
    add_agent(world.tenant, "caller", ["broken"])
    task = drive(submit(world.tenant, [{"tool": "broken", "args": {}}, FINAL], agent="caller").pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    assert Step.objects.get(task=task, step_no=1).error["type"] == "tool_unavailable"
