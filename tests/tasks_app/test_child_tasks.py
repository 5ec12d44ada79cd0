"""Child tasks: an agent calling another agent as the tool `agent:<name>`, run
by the real runner in-process (the child a task of its own, the parent
waiting without a lease, woken by the child's end)."""
from __future__ import annotations

import json
from typing import Any

import pytest

from approvals_app.services.answers import task_provide_input
from foundations.actors import SYSTEM
from foundations.errors import DomainError
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, Task
from tasks_app.runner import children as runner_children
from tasks_app.runner.loop import run_slice
from tasks_app.services import children
from tasks_app.services.admission import admit_created_tasks
from tasks_app.services.agents import agent_create, agent_update
from tasks_app.services.tasks import task_cancel
from tasks_app.store import hooks as store_hooks
from tests.factories import submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.openai_server import reply
from tests.fakes.runtime import add_agent, add_tool
from tests.helpers import drive, slices_until_waiting
from tools_app.models import LedgerStatus, ToolExecution

pytestmark = pytest.mark.django_db(transaction=True)


def _scripted(tenant, name: str, script: list[Any], tools: list[str] | None = None):  # type: ignore[no-untyped-def]
    return add_agent(tenant, name, tools or ["echo"],
                     model={"backend": "scripted", "script": script})


def _call(agent: str, goal: str = "do it", input: Any = None) -> dict[str, Any]:
    return {"tool": f"agent:{agent}", "args": {"goal": goal, "input": input or {}}}


def _only_child(parent: Task) -> Task:
    (child,) = Task.objects.filter(parent=parent)
    return child


@pytest.fixture
def tenant(world):  # type: ignore[no-untyped-def]
    add_tool(world.tenant, "echo", "echo")
    return world.tenant


def test_an_agent_calls_another_and_uses_its_result(tenant, openai_server):
    _scripted(tenant, "helper", [{"tool": "echo", "args": {"n": 7}},
                                 {"final": {"answer": "seven"}}])
    openai_agent(tenant, openai_server, name="boss", tools=["agent:helper"])
    openai_server.push(
        reply("Asking the helper.", tool_calls=[
            ("agent__helper", {"goal": "Count to seven", "input": {"upto": 7}})]),
        reply('{"answer": "the helper says seven"}'))
    parent = submit(tenant, None, agent="boss", goal="Ask the helper")
    slices_until_waiting(parent.pk)  # the parent starts the child, then waits for it
    parent.refresh_from_db(fields=["lease_owner", "next_run_at"])
    child = _only_child(parent)
    assert parent.lease_owner == ""  # it holds no worker while it waits
    assert (child.parent_id, child.parent_step_no, child.depth) == (parent.pk, 1, 1)
    assert (child.tenant_id, child.requester_id, child.goal, child.input) == (
        parent.tenant_id, parent.requester_id, "Count to seven", {"upto": 7})
    started = Event.objects.get(task=parent, type="child_started")
    assert started.payload == {"step_no": 1, "task": child.pk, "agent": "helper",
                               "agent_version": 1}
    assert drive(child.pk).status == TaskStatus.SUCCEEDED
    parent = drive(parent.pk)

    assert parent.status == TaskStatus.SUCCEEDED, parent.failure_detail
    assert parent.result == {"answer": "the helper says seven"}
    step = Step.objects.get(task=parent, step_no=1)
    assert (step.tool, step.status, step.output) == ("agent:helper", "SUCCEEDED",
                                                      {"answer": "seven"})
    assert ToolExecution.objects.get(idempotency_key=step.idempotency_key).status == (
        LedgerStatus.SUCCEEDED)
    first, second = openai_server.requests
    tools = {t["function"]["name"]: t["function"] for t in first.body["tools"]}
    assert set(tools["agent__helper"]["parameters"]["properties"]) >= {"goal", "input"}
    call = second.body["messages"][-2]["tool_calls"][0]["function"]
    assert call["name"] == "agent__helper"  # the history speaks the model's name too
    result = json.loads(second.body["messages"][-1]["content"])
    assert result["output"] == {"answer": "seven"}


def test_the_childs_end_wakes_the_parent_at_once(tenant):
    _scripted(tenant, "helper", [{"final": {"ok": 1}}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper"), {"final": {"done": True}}], agent="boss")
    slices_until_waiting(parent.pk)
    parent.refresh_from_db(fields=["next_run_at"])
    waiting_until = parent.next_run_at
    assert waiting_until is not None
    drive(_only_child(parent).pk)
    parent.refresh_from_db(fields=["next_run_at"])
    assert parent.next_run_at < waiting_until  # due now, not at its re-check


def test_a_child_starts_even_when_its_parent_fills_the_tenants_limit(tenant, settings):
    """A waiting parent holds its tenant's only slot: its child is admitted all
    the same (held back, it would wait for the parent, which waits for it)."""
    from tasks_app.services.admission import admit_created_tasks

    settings.TETHER = {**settings.TETHER, "MAX_RUNNING_PER_TENANT": 1}
    _scripted(tenant, "helper", [{"final": {"ok": 1}}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper"), {"final": {"done": True}}], agent="boss",
                    subject="customer-7")
    other = submit(tenant, [{"final": {"later": True}}])  # an ordinary task still waits its turn
    slices_until_waiting(parent.pk)
    child = _only_child(parent)
    assert child.subject == "customer-7"  # about whom its parent is
    admit_created_tasks()
    assert Task.objects.get(pk=child.pk).status != TaskStatus.CREATED
    assert Task.objects.get(pk=other.pk).status == TaskStatus.CREATED
    assert drive(child.pk).status == TaskStatus.SUCCEEDED
    assert drive(parent.pk).status == TaskStatus.SUCCEEDED


def test_a_resumed_step_finds_the_child_it_started(tenant):
    _scripted(tenant, "helper", [{"final": {"ok": 1}}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper"), {"final": {"done": True}}], agent="boss")
    slices_until_waiting(parent.pk)
    step = Step.objects.get(task=parent, step_no=1)
    for _ in range(3):  # passes over the open step, as after a crash or a re-check
        assert children.child_for_step(children.ParentStep(
            task_id=parent.pk, tenant_id=parent.tenant_id, requester_id=None,
            trace_id=parent.trace_id, version=parent.version, step_no=1,
            step_key=step.idempotency_key, tool=step.tool, args=step.args)).pk == (
            _only_child(parent).pk)
        run_slice(parent.pk)
    assert Task.objects.filter(parent=parent).count() == 1
    assert _only_child(parent).idempotency_key == children.child_key(step.idempotency_key)


def test_a_failed_child_is_a_typed_error_in_the_parent(tenant):
    _scripted(tenant, "helper", [{"tool": "nope", "args": {}}], tools=["echo"])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper"), {"final": {"done": True}}], agent="boss")
    slices_until_waiting(parent.pk)
    child = _only_child(parent)
    task_cancel(task_id=child.pk, actor=SYSTEM, reason="not needed")
    parent = drive(parent.pk)
    step = Step.objects.get(task=parent, step_no=1)
    assert step.status == "FAILED"
    assert step.error["type"] == "child_failed"
    assert (step.error["status"], step.error["failure_reason"], step.error["task"]) == (
        "CANCELED", "canceled", child.pk)
    assert parent.status == TaskStatus.SUCCEEDED  # the parent went on after the error


def test_bad_arguments_start_no_child(tenant):
    _scripted(tenant, "helper", [{"final": {"ok": 1}}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [{"tool": "agent:helper", "args": {"goal": "", "input": []}},
                             {"final": {"done": True}}], agent="boss")
    parent = drive(parent.pk)
    step = Step.objects.get(task=parent, step_no=1)
    assert step.kind == "invalid" and step.error["type"] == "invalid_arguments"
    assert not Task.objects.filter(parent=parent).exists()


def test_a_child_waiting_for_a_person_keeps_the_parent_waiting_without_a_lease(tenant):
    _scripted(tenant, "helper", [{"ask": "Which colour?"}, {"final": {"colour": "blue"}}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper"), {"final": {"done": True}}], agent="boss")
    slices_until_waiting(parent.pk)
    child = drive(_only_child(parent).pk)
    assert child.status == TaskStatus.WAITING_FOR_INPUT
    run_slice(parent.pk)
    parent = Task.objects.get(pk=parent.pk)
    assert (parent.status, parent.lease_owner) == (TaskStatus.RUNNING, "")
    assert Step.objects.get(task=parent, step_no=1).status == "RUNNING"
    task_provide_input(task_id=child.pk, answer="blue", actor=SYSTEM)
    assert drive(child.pk).status == TaskStatus.SUCCEEDED
    parent = drive(parent.pk)
    assert parent.status == TaskStatus.SUCCEEDED
    assert Step.objects.get(task=parent, step_no=1).output == {"colour": "blue"}


def test_canceling_a_parent_cancels_its_children_down_the_tree(tenant):
    _scripted(tenant, "leaf", [{"ask": "Anything?"}])
    _scripted(tenant, "middle", [_call("leaf"), {"final": {}}], tools=["agent:leaf"])
    _scripted(tenant, "boss", [], tools=["agent:middle"])
    parent = submit(tenant, [_call("middle"), {"final": {"done": True}}], agent="boss")
    slices_until_waiting(parent.pk)
    middle = _only_child(parent)
    slices_until_waiting(middle.pk)
    leaf = drive(_only_child(middle).pk)
    assert (middle.depth, leaf.depth) == (1, 2)
    assert leaf.status == TaskStatus.WAITING_FOR_INPUT

    task_cancel(task_id=parent.pk, actor=SYSTEM, reason="changed my mind")
    assert Task.objects.get(pk=middle.pk).status == TaskStatus.CANCELED
    assert Task.objects.get(pk=leaf.pk).status == TaskStatus.CANCELED
    assert Step.objects.get(task=parent, step_no=1).status == "DISCARDED"  # fenced


def test_the_sweep_cancels_a_child_whose_parent_ended(tenant, monkeypatch):
    _scripted(tenant, "helper", [{"ask": "Anything?"}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper")], agent="boss")
    slices_until_waiting(parent.pk)
    child = drive(_only_child(parent).pk)
    # the cancel that follows the parent's end is lost (its worker died)
    monkeypatch.setattr(store_hooks, "_task_ended", [])
    task_cancel(task_id=parent.pk, actor=SYSTEM)
    assert Task.objects.get(pk=child.pk).status == TaskStatus.WAITING_FOR_INPUT
    children.children_sweep()
    assert Task.objects.get(pk=child.pk).status == TaskStatus.CANCELED


def test_a_child_cannot_call_an_ancestors_agent_at_run_time(tenant):
    # Registered before the cycle closed (profiles written directly), so only
    # the runner stands in the way.
    _scripted(tenant, "ping", [_call("pong"), {"final": {}}], tools=["agent:pong"])
    _scripted(tenant, "pong", [_call("ping"), {"final": {"pong": True}}], tools=["agent:ping"])
    parent = submit(tenant, [_call("pong"), {"final": {"done": True}}], agent="ping")
    slices_until_waiting(parent.pk)
    child = drive(_only_child(parent).pk)
    assert child.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=child, step_no=1)
    assert step.error["type"] == "agent_cycle"
    assert not Task.objects.filter(parent=child).exists()


def test_depth_is_bounded(tenant, monkeypatch):
    monkeypatch.setattr(children, "MAX_DEPTH", 2)
    for level in range(4):
        _scripted(tenant, f"a{level}", [_call(f"a{level + 1}"), {"final": {"level": level}}],
                  tools=[f"agent:a{level + 1}"])
    _scripted(tenant, "a4", [{"final": {}}])
    task = submit(tenant, [_call("a1"), {"final": {}}], agent="a0")
    chain = [task]
    while True:
        slices_until_waiting(chain[-1].pk)
        below = Task.objects.filter(parent=chain[-1]).first()
        if below is None:
            break
        chain.append(below)
    assert [t.depth for t in chain] == [0, 1, 2]
    deepest = Task.objects.get(pk=chain[-1].pk)
    assert deepest.status == TaskStatus.SUCCEEDED
    assert Step.objects.get(task=deepest, step_no=1).error["type"] == "depth_exceeded"


def test_a_profile_that_reaches_itself_is_refused_at_registration(tenant):
    agent_create(tenant_id=tenant.pk, name="first", tools=["echo"])
    agent_create(tenant_id=tenant.pk, name="second", tools=["agent:first"])
    with pytest.raises(DomainError) as refused:
        agent_update(tenant_id=tenant.pk, name="first", changes={"tools": ["agent:second"]})
    assert refused.value.details["tools"] == [
        "agent:second: first -> second -> first calls 'first' back (a cycle)"]
    with pytest.raises(DomainError) as itself:
        agent_create(tenant_id=tenant.pk, name="narcissus", tools=["agent:narcissus"])
    assert itself.value.details["tools"] == ["agent:narcissus: an agent cannot call itself"]
    with pytest.raises(DomainError) as missing:
        agent_create(tenant_id=tenant.pk, name="lonely", tools=["agent:nobody"])
    assert missing.value.details["tools"] == ["no agent named 'nobody' in this tenant"]


def test_a_parent_that_ended_starts_no_child(tenant):
    _scripted(tenant, "helper", [{"final": {"ok": 1}}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper")], agent="boss")
    task_cancel(task_id=parent.pk, actor=SYSTEM)
    refused = children.child_for_step(children.ParentStep(
        task_id=parent.pk, tenant_id=parent.tenant_id, requester_id=None,
        trace_id=parent.trace_id, version=parent.version, step_no=1, step_key="k" * 64,
        tool="agent:helper", args={"goal": "late"}))
    assert refused.error["type"] == "parent_ended"  # type: ignore[union-attr]
    assert not Task.objects.filter(parent=parent).exists()


def test_a_pass_that_dies_after_starting_the_child_leaves_one_child(tenant, monkeypatch):
    _scripted(tenant, "helper", [{"final": {"ok": 1}}])
    _scripted(tenant, "boss", [], tools=["agent:helper"])
    parent = submit(tenant, [_call("helper"), {"final": {"done": True}}], agent="boss")
    admit_created_tasks()

    def dies(child: Task) -> None:
        raise RuntimeError("the worker died right after the child's commit")

    monkeypatch.setattr(runner_children, "outcome_of", dies)
    assert run_slice(parent.pk).ended == "error"  # nothing of the parent's step committed
    assert Task.objects.filter(parent=parent).count() == 1
    assert Step.objects.get(task=parent, step_no=1).status == "RUNNING"
    monkeypatch.undo()
    Task.objects.filter(pk=parent.pk).update(next_run_at=None)  # its backoff, skipped
    drive(_only_child(parent).pk)
    parent = drive(parent.pk)
    assert parent.status == TaskStatus.SUCCEEDED
    assert Task.objects.filter(parent=parent).count() == 1
    assert Step.objects.get(task=parent, step_no=1).output == {"ok": 1}
