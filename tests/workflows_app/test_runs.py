"""Workflow runs through the runner: branches, maps, skips, failures,
compensation, people, and the node view of a run."""
from __future__ import annotations

import json

import pytest

from approvals_app.services.answers import task_provide_input
from foundations.actors import SYSTEM
from tasks_app.machine import TaskStatus
from tasks_app.models import Event
from tasks_app.runner.compensation import compensate_task
from tasks_app.services.dispatch import MANUAL_COMPENSATIONS
from tests.fakes import python_tools
from tests.fakes.runtime import add_tool
from tests.helpers import drive
from tools_app.models import DemoNotification
from workflows_app.orchestrator import run_nodes
from workflows_app.services.runs import submit_run
from workflows_app.services.workflows import workflow_create

pytestmark = pytest.mark.django_db(transaction=True)

FLOW = {
    "inputs": {"type": "object", "required": ["order"],
               "properties": {"order": {"type": "string"}, "amount": {"type": "integer"}}},
    "nodes": [
        {"id": "lookup", "tool": "echo", "args": {"order": "${inputs.order}",
                                                   "contacts": ["a", "b", "c"]}},
        {"id": "big", "after": ["lookup"], "when": "inputs.amount > 100",
         "tool": "echo", "args": {"branch": "big", "amount": "${inputs.amount}"}},
        {"id": "small", "after": ["lookup"], "when": "inputs.amount <= 100",
         "tool": "echo", "args": {"branch": "small"}},
        {"id": "after_small", "after": ["small"], "tool": "echo", "args": {"x": 1}},
        {"id": "notify", "after": ["lookup"],
         "map": {"over": "nodes.lookup.echo.contacts", "tool": "note",
                 "args": {"to": "${item}", "text": "order ${inputs.order} #${index}"}}},
    ],
    "output": {"order": "${nodes.lookup.echo.order}",
               "big": "${has(nodes.big) ? nodes.big.echo.amount : null}",
               "notes": "${nodes.notify.map(n, n.note_id)}"},
}


@pytest.fixture
def flows(world):  # type: ignore[no-untyped-def]
    for name in ("echo", "business_error"):
        add_tool(world.tenant, name, name)
    add_tool(world.tenant, "undo_note", "undo_note", side_effect="write", max_retries=0)
    add_tool(world.tenant, "note", "note", side_effect="write", max_retries=0)
    MANUAL_COMPENSATIONS.clear()
    python_tools.reset()
    return world


def _run(world, definition, input, name="flow"):  # type: ignore[no-untyped-def]
    workflow_create(tenant_id=world.tenant.pk, name=name, definition=definition, actor=SYSTEM)
    task = submit_run(tenant_id=world.tenant.pk, requester_id=None, workflow=name, input=input,
                      actor=SYSTEM).task
    return drive(task.pk)


def _nodes(task):  # type: ignore[no-untyped-def]
    return {n["id"]: n for n in run_nodes(task)}


def test_a_run_with_a_branch_and_a_map_ends_with_the_mapped_output(flows):
    task = _run(flows, FLOW, {"order": "A-1", "amount": 500})
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    # the items ran at once (in any order); the output lists their results in item order
    notes = sorted(DemoNotification.objects.exclude(customer="undo"), key=lambda n: n.message)
    assert [n.customer for n in notes] == ["a", "b", "c"]
    assert [n.message for n in notes] == ["order A-1 #0", "order A-1 #1", "order A-1 #2"]
    assert task.result == {"order": "A-1", "big": 500, "notes": [n.pk for n in notes]}
    nodes = _nodes(task)
    assert {k: v["status"] for k, v in nodes.items()} == {
        "lookup": "succeeded", "big": "succeeded", "small": "skipped",
        "after_small": "skipped", "notify": "succeeded"}
    # each map item's call was made once, under its own key
    keys = [s.idempotency_key for s in task.steps.filter(tool="note")]
    assert len(set(keys)) == 3 and all(python_tools.CALLS[k] == 1 for k in keys)
    assert task.agent_id is None and task.agent_snapshot["workflow"] == {"name": "flow",
                                                                         "version": 1}


def test_a_false_condition_skips_the_node_and_what_depends_only_on_it(flows):
    task = _run(flows, FLOW, {"order": "A-2", "amount": 50})
    assert task.status == TaskStatus.SUCCEEDED
    nodes = _nodes(task)
    assert nodes["big"]["status"] == "skipped" and nodes["small"]["status"] == "succeeded"
    assert nodes["after_small"]["status"] == "succeeded"
    assert task.result["big"] is None  # a skipped node has no output


def test_a_failing_non_critical_node_is_recorded_and_the_run_goes_on(flows):
    definition = {"nodes": [
        {"id": "first", "tool": "echo", "args": {}},
        {"id": "optional", "after": ["first"], "tool": "business_error", "critical": False,
         "retries": 1},
        {"id": "last", "after": ["optional"], "tool": "echo", "args": {"done": True}},
    ]}
    task = _run(flows, definition, {})
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    nodes = _nodes(task)
    assert nodes["optional"]["status"] == "failed" and len(nodes["optional"]["steps"]) == 2
    assert nodes["last"]["status"] == "succeeded"
    assert task.result == {"last": {"echo": {"done": True}}}


def test_a_failing_critical_node_fails_the_run_and_compensates_once_in_reverse(flows):
    definition = {"nodes": [
        {"id": "charge", "tool": "note", "args": {"to": "ada", "text": "charge"},
         "compensate": {"tool": "undo_note", "args": {
             "original_key": "charge-${output.note_id}", "original_result": "${output}"}}},
        {"id": "ship", "after": ["charge"], "map": {"over": "[1, 2]", "tool": "note",
                                                     "args": {"to": "s${item}", "text": "x"}},
         "compensate": {"tool": "undo_note", "args": {"original_key": "ship-${item}"}}},
        {"id": "bill", "after": ["ship"], "tool": "business_error"},
        {"id": "never", "after": ["bill"], "tool": "echo"},
    ]}
    task = _run(flows, definition, {})
    assert task.status == TaskStatus.FAILED and task.failure_reason == "workflow_failed"
    assert _nodes(task)["never"]["status"] == "not_run"
    assert [task.pk] == MANUAL_COMPENSATIONS
    assert compensate_task(task.pk) == 3
    assert compensate_task(task.pk) == 0  # a second run finds them done (the ledger)
    undone = list(DemoNotification.objects.filter(customer="undo").order_by("id")
                  .values_list("message", flat=True))
    charge = DemoNotification.objects.get(customer="ada")
    assert undone == ["ship-2", "ship-1", f"charge-{charge.pk}"]  # newest first
    assert Event.objects.filter(task=task, type="compensation_succeeded").count() == 3


def test_a_human_node_waits_for_an_answer_that_matches_its_form(flows):
    definition = {"nodes": [
        {"id": "ask", "human": {"question": "How many for ${inputs.who}?",
                                "schema": {"type": "object", "required": ["n"],
                                           "properties": {"n": {"type": "integer"}}}}},
        {"id": "use", "after": ["ask"], "tool": "echo", "args": {"n": "${nodes.ask.n}"}},
    ], "output": "${nodes.use.echo.n}"}
    task = _run(flows, definition, {"who": "Ada"})
    assert task.status == TaskStatus.WAITING_FOR_INPUT
    assert task.steps.get().decision["question"] == "How many for Ada?"
    from foundations.errors import DomainError
    with pytest.raises(DomainError) as refused:
        task_provide_input(task_id=task.pk, answer="three", actor=SYSTEM)
    assert "answer" in refused.value.details
    assert task.steps.get().status == "RUNNING"  # nothing written
    task_provide_input(task_id=task.pk, answer=json.dumps({"n": 3}), actor=SYSTEM)
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED and task.result == 3


def test_a_rejected_approval_fails_the_run(flows):
    definition = {"nodes": [
        {"id": "ok", "human": {"approval": "Ship it?"}},
        {"id": "ship", "after": ["ok"], "tool": "echo"},
    ]}
    task = _run(flows, definition, {})
    assert task.status == TaskStatus.WAITING_FOR_INPUT
    task_provide_input(task_id=task.pk, answer='{"approved": false, "comment": "no"}',
                       actor=SYSTEM)
    task = drive(task.pk)
    assert task.status == TaskStatus.FAILED
    assert _nodes(task)["ok"]["error"]["type"] == "rejected"
    assert not task.steps.filter(tool="echo").exists()


def test_a_rejected_approval_with_retries_is_asked_again(flows):
    definition = {"nodes": [
        {"id": "ok", "human": {"approval": "Ship it?"}, "retries": 1},
        {"id": "ship", "after": ["ok"], "tool": "echo"},
    ]}
    task = _run(flows, definition, {})
    task_provide_input(task_id=task.pk, answer='{"approved": false, "comment": "not yet"}',
                       actor=SYSTEM)
    task = drive(task.pk)
    assert task.status == TaskStatus.WAITING_FOR_INPUT  # asked again: one retry
    assert task.steps.filter(kind="ask").count() == 2
    task_provide_input(task_id=task.pk, answer='{"approved": true}', actor=SYSTEM)
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    assert _nodes(task)["ok"]["output"] == {"approved": True, "comment": ""}
    assert len(_nodes(task)["ok"]["steps"]) == 2


def test_input_that_does_not_match_the_schema_is_refused_and_nothing_is_written(flows):
    from foundations.errors import DomainError
    from tasks_app.models import Task
    workflow_create(tenant_id=flows.tenant.pk, name="flow", definition=FLOW, actor=SYSTEM)
    with pytest.raises(DomainError) as refused:
        submit_run(tenant_id=flows.tenant.pk, requester_id=None, workflow="flow",
                   input={"amount": 3}, actor=SYSTEM)
    assert "input" in refused.value.details
    assert not Task.objects.exists()


def test_a_maps_items_and_independent_nodes_are_in_flight_at_once(flows):
    """Five map items and a node of another branch all enter their (blocked)
    tool before any is let go: one slice has them in flight together, bounded
    by the map's `max_parallel`; each runs once."""
    import threading

    from tests.helpers import wait_for

    add_tool(flows.tenant, "blocking_note", "blocking_note", side_effect="write", max_retries=0)
    definition = {"nodes": [
        {"id": "fan", "map": {"over": "[1, 2, 3, 4, 5, 6, 7]", "tool": "blocking_note",
                              "max_parallel": 5,
                              "args": {"gate": "g", "to": "c${item}", "text": "x"}}},
        {"id": "side", "tool": "blocking_note", "args": {"gate": "g", "to": "side", "text": "y"}},
    ]}
    workflow_create(tenant_id=flows.tenant.pk, name="fan", definition=definition, actor=SYSTEM)
    task = submit_run(tenant_id=flows.tenant.pk, requester_id=None, workflow="fan", input={},
                      actor=SYSTEM).task
    gate = python_tools.gate("g")
    done: dict[str, object] = {}
    runner = threading.Thread(target=lambda: done.update(task=drive(task.pk)), daemon=True)
    runner.start()
    wait_for(lambda: gate.entries >= 6, message="five items and the side node in flight")
    assert gate.entries == 6  # max_parallel holds the other two items back
    gate.release.set()
    runner.join(30)
    ended = done["task"]
    assert ended.status == TaskStatus.SUCCEEDED, ended.failure_detail
    assert gate.entries == 8
    keys = [s.idempotency_key for s in ended.steps.filter(tool="blocking_note")]
    assert len(keys) == 8 and all(python_tools.CALLS[k] == 1 for k in keys)
    assert len(ended.result["fan"]) == 7


def test_a_retry_from_a_node_reuses_what_succeeded_before_it(flows):
    from tasks_app.retries.services import task_retry
    from tools_app.models import DemoOrder
    from workflows_app.services.runs import retry_step_of_node

    definition = {"nodes": [
        {"id": "note", "tool": "note", "args": {"to": "ada", "text": "once"}},
        {"id": "look", "after": ["note"], "tool": "lookup_order",
         "args": {"order_id": "Z-9"}},
    ], "output": "${nodes.look.customer}"}
    failed = _run(flows, definition, {})
    assert failed.status == TaskStatus.FAILED  # no order Z-9 yet
    DemoOrder.objects.create(order_id="Z-9", customer="Zoe", email="z@example.com",
                             amount_cents=10)
    from_step = retry_step_of_node(failed, "look")
    assert from_step == failed.steps.get(tool="lookup_order").step_no
    retry = drive(task_retry(tenant_id=flows.tenant.pk, task_id=failed.pk, actor=SYSTEM,
                             from_step=from_step).task.pk)
    assert retry.status == TaskStatus.SUCCEEDED and retry.result == "Zoe"
    assert DemoNotification.objects.filter(customer="ada").count() == 1  # not written again
    assert _nodes(retry)["note"]["status"] == "succeeded"


def test_a_nodes_timeout_narrows_its_tools(flows):
    add_tool(flows.tenant, "blocking_read", "blocking_read", max_retries=0, timeout_s=30)
    definition = {"nodes": [{"id": "slow", "tool": "blocking_read", "timeout_s": 0.3,
                             "args": {"gate": "never"}}]}
    task = _run(flows, definition, {})
    assert task.status == TaskStatus.FAILED
    step = task.steps.get(tool="blocking_read")
    assert step.error == {"type": "timeout", "message": "no answer within 0.3s"}


@pytest.mark.parametrize(("on_expiry", "critical"), [("reject", False), ("escalate", True)])
def test_a_question_that_expires_fails_its_node_or_escalates(flows, on_expiry, critical):
    from datetime import timedelta

    from django.utils import timezone

    from approvals_app.models import Question
    from approvals_app.services.decisions import questions_expire

    definition = {"nodes": [
        {"id": "ask", "critical": critical,
         "human": {"question": "Still there?", "expires_in": 60, "on_expiry": on_expiry}},
        {"id": "after", "tool": "echo", "args": {"went": "on"}},
    ]}
    task = _run(flows, definition, {})
    assert task.status == TaskStatus.WAITING_FOR_INPUT
    question = Question.objects.get(task=task)
    assert question.expires_at is not None and question.on_expiry == on_expiry
    assert questions_expire() == 0  # not yet due
    Question.objects.filter(pk=question.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert questions_expire() == 1
    task = drive(task.pk)
    assert Question.objects.get(pk=question.pk).status == "expired"
    if on_expiry == "escalate":
        assert task.status == TaskStatus.WAITING_FOR_HUMAN
        return
    assert task.status == TaskStatus.SUCCEEDED, task.failure_detail
    node = _nodes(task)["ask"]
    assert node["status"] == "failed" and node["error"]["type"] == "expired"
