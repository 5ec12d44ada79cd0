"""Approvals through `approval_decide`: approve, edit and approve, reject,
respond; stale views, double decisions and separation of duties."""
from __future__ import annotations

import pytest

from accounts_app.models import Role
from approvals_app.models import Approval
from approvals_app.services.decisions import approval_decide
from foundations.errors import DomainError, ErrorKind
from tasks_app.context.builder import build_context
from tasks_app.machine import TaskStatus
from tasks_app.models import Event, Step, StepStatus, Task
from tasks_app.services.demo import demo_agent_ensure
from tasks_app.snapshot import TaskSnapshot
from tests.factories import actor_of, make_user, submit
from tests.fakes.runtime import assert_log_consistent, events_of
from tests.helpers import drive
from tools_app.models import DemoRefund, ToolExecution
from tools_app.registry import tool_specs

pytestmark = pytest.mark.django_db(transaction=True)

REFUND = {"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 1000,
                                           "reason": "damaged"},
          "reason": "the parcel arrived damaged"}


def _pending(world, *, requester=None, agent: str = "support") -> tuple[Task, Approval]:  # type: ignore[no-untyped-def]
    task = drive(submit(world.tenant, [REFUND, {"final": {"done": True}}], requester=requester,
                        agent=agent).pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    return task, Approval.objects.get(task=task)


def _reviewer(world):  # type: ignore[no-untyped-def]
    return actor_of(world.users["reviewer"])


def _frozen(task: Task, approval: Approval) -> tuple:
    t = Task.objects.get(pk=task.pk)
    a = Approval.objects.get(pk=approval.pk)
    s = Step.objects.get(pk=a.step_id)
    return (t.status, t.version, Event.objects.filter(task=t).count(), a.status, a.edited_args,
            s.status, s.args, s.idempotency_key, DemoRefund.objects.count())


def test_a_risky_call_waits_for_approval_and_nothing_runs_before(world):
    task, approval = _pending(world)
    step = Step.objects.get(pk=approval.step_id)
    assert step.status == StepStatus.PENDING_APPROVAL
    assert approval.args == REFUND["args"] and approval.task_version == task.version
    assert approval.preview["reason"] == "the parcel arrived damaged"
    assert approval.preview["risk"] == "high"
    assert not ToolExecution.objects.filter(task_id=task.pk).exists()
    assert not DemoRefund.objects.exists()


def test_approve_runs_exactly_the_approved_action(world):
    task, approval = _pending(world)
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                    decision="approve", comment="looks right", expected_version=task.version)
    task = drive(task.pk)

    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(pk=approval.step_id)
    assert step.status == StepStatus.SUCCEEDED and step.output["amount_cents"] == 1000
    (refund,) = DemoRefund.objects.all()
    assert (refund.idempotency_key, refund.order_id, refund.amount_cents) == (
        step.idempotency_key, "A-1", 1000)
    assert ToolExecution.objects.get(idempotency_key=step.idempotency_key).args == REFUND["args"]
    (granted,) = events_of(task.pk, "approval_granted")
    assert granted.actor == world.users["reviewer"].username and granted.actor_role == Role.REVIEWER
    assert granted.payload["comment"] == "looks right"
    assert granted.payload["seen_version"] == approval.task_version
    assert_log_consistent(task.pk)


def test_approve_with_edited_arguments_revalidates_and_stores_the_diff(world):
    task, approval = _pending(world)
    edited = {"order_id": "A-1", "amount_cents": 400, "reason": "damaged"}
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                    decision="approve", args=edited, comment="partial refund")

    approval.refresh_from_db()
    assert approval.status == "approved" and approval.edited_args == edited
    assert approval.args_diff == {"amount_cents": {"from": 1000, "to": 400}}
    assert events_of(task.pk, "approval_granted")[0].payload["args_diff"] == approval.args_diff
    task = drive(task.pk)
    step = Step.objects.get(pk=approval.step_id)
    assert step.args == edited
    (refund,) = DemoRefund.objects.all()
    assert refund.amount_cents == 400 and refund.idempotency_key == step.idempotency_key
    assert task.status == TaskStatus.SUCCEEDED
    assert_log_consistent(task.pk)


@pytest.mark.parametrize("bad_args", [
    {"order_id": "A-1", "amount_cents": -5},
    {"order_id": "A-1"},
    {"order_id": "A-1", "amount_cents": 10, "sneaky": True},
    "not an object",
])
def test_a_bad_edit_is_refused_and_changes_nothing(world, bad_args):
    task, approval = _pending(world)
    before = _frozen(task, approval)
    with pytest.raises(DomainError) as refused:
        approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                        decision="approve", args=bad_args)
    assert refused.value.kind == ErrorKind.INVALID and "args" in refused.value.details
    assert _frozen(task, approval) == before


def test_reject_gives_the_model_a_typed_rejection(world):
    task, approval = _pending(world)
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                    decision="reject", comment="the customer already got a voucher")

    task = Task.objects.get(pk=task.pk)
    step = Step.objects.get(pk=approval.step_id)
    assert task.status == TaskStatus.RUNNING
    assert step.status == StepStatus.REJECTED
    assert step.error == {"type": "rejected", "message": "a reviewer rejected this call",
                          "comment": "the customer already got a voucher"}
    context = build_context(TaskSnapshot.of(task), tools=tool_specs(tenant_id=world.tenant.pk))
    assert context.window[-1]["error"]["type"] == "rejected"
    assert any("voucher" in item.text for item in context.pinned)

    task = drive(task.pk)  # the next decision comes from the model
    assert task.status == TaskStatus.SUCCEEDED
    assert not DemoRefund.objects.exists()
    assert not ToolExecution.objects.filter(task_id=task.pk).exists()
    assert_log_consistent(task.pk)


def test_a_rejection_needs_a_reason(world):
    task, approval = _pending(world)
    before = _frozen(task, approval)
    with pytest.raises(DomainError) as refused:
        approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                        decision="reject", comment="  ")
    assert refused.value.kind == ErrorKind.INVALID
    assert _frozen(task, approval) == before


def test_respond_supplies_the_result_instead_of_running_the_tool(world):
    task, approval = _pending(world)
    output = {"refund_id": "manual-77", "status": "refunded"}
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                    decision="respond", output=output, comment="refunded by hand")
    step = Step.objects.get(pk=approval.step_id)
    assert step.status == StepStatus.SUCCEEDED and step.output == output
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED and task.tool_calls == 1
    assert not DemoRefund.objects.exists()
    assert not ToolExecution.objects.filter(task_id=task.pk).exists()
    assert_log_consistent(task.pk)


@pytest.mark.parametrize(("kwargs", "kind", "code"), [
    ({"decision": "approve", "expected_version": 1}, ErrorKind.CONFLICT, "stale_version"),
    ({"decision": "respond", "output": None}, ErrorKind.INVALID, "invalid"),
    ({"decision": "maybe"}, ErrorKind.INVALID, "invalid"),
])
def test_refused_decisions_change_nothing(world, kwargs, kind, code):
    task, approval = _pending(world)
    before = _frozen(task, approval)
    with pytest.raises(DomainError) as refused:
        approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                        **kwargs)
    assert (refused.value.kind, refused.value.code) == (kind, code)
    assert _frozen(task, approval) == before


def test_a_second_decision_is_a_conflict(world):
    task, approval = _pending(world)
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                    decision="approve")
    before = _frozen(task, approval)
    for decision in ("approve", "reject"):
        with pytest.raises(DomainError) as refused:
            approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk,
                            actor=actor_of(world.users["admin"]), decision=decision,
                            comment="again")
        assert refused.value.kind == ErrorKind.CONFLICT and refused.value.code == "already_decided"
    assert _frozen(task, approval) == before


def test_only_reviewers_and_admins_decide_and_only_in_their_tenant(world):
    task, approval = _pending(world)
    before = _frozen(task, approval)
    for role in (Role.REQUESTER, Role.OPERATOR):
        with pytest.raises(DomainError) as refused:
            approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk,
                            actor=actor_of(world.users[role]), decision="approve")
        assert refused.value.kind == ErrorKind.FORBIDDEN
    with pytest.raises(DomainError) as hidden:
        approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk + 999,
                        actor=_reviewer(world), decision="approve")
    assert hidden.value.kind == ErrorKind.NOT_FOUND
    assert _frozen(task, approval) == before


def test_the_requester_cannot_approve_their_own_task(world):
    own = world.users["reviewer"]
    task, approval = _pending(world, requester=own)
    before = _frozen(task, approval)
    with pytest.raises(DomainError) as refused:
        approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=actor_of(own),
                        decision="approve")
    assert (refused.value.kind, refused.value.code) == (ErrorKind.FORBIDDEN, "separation_of_duties")
    assert _frozen(task, approval) == before
    # somebody else may
    other = make_user(world.tenant, Role.REVIEWER, username="second-reviewer")
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=actor_of(other),
                    decision="approve")
    assert drive(task.pk).status == TaskStatus.SUCCEEDED


def test_a_profile_may_allow_self_approval(world):
    demo_agent_ensure(world.tenant, name="trusted", on_exhaustion="fail", allow_self_approval=True)
    own = world.users["admin"]
    task, approval = _pending(world, requester=own, agent="trusted")
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=actor_of(own),
                    decision="approve")
    assert drive(task.pk).status == TaskStatus.SUCCEEDED
    assert DemoRefund.objects.count() == 1


def test_always_allow_skips_later_approvals_of_that_tool_in_the_task(world):
    script = [REFUND, {**REFUND, "args": {**REFUND["args"], "amount_cents": 5}}, {"final": {}}]
    task = drive(submit(world.tenant, script).pk)
    approval = Approval.objects.get(task=task)
    approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                    decision="approve", always_allow=True)
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert Approval.objects.filter(task=task).count() == 1
    assert sorted(DemoRefund.objects.values_list("amount_cents", flat=True)) == [5, 1000]


def test_an_approval_is_bound_to_the_arguments_it_showed(world):
    task, approval = _pending(world)
    # test setup: the action changes behind the reviewer's back
    Step.objects.filter(pk=approval.step_id).update(args={"order_id": "A-1", "amount_cents": 4999})
    before = _frozen(task, approval)
    with pytest.raises(DomainError) as refused:
        approval_decide(approval_id=approval.pk, tenant_id=world.tenant.pk, actor=_reviewer(world),
                        decision="approve")
    assert (refused.value.kind, refused.value.code) == (ErrorKind.CONFLICT, "stale_arguments")
    assert _frozen(task, approval) == before
    assert not DemoRefund.objects.exists()
