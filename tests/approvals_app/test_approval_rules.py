"""Approval rules, requesters' scopes and routing, through the runner and the
decision services: two different reviewers for a large refund, a deny the
model is told, an authorization outside the requester's scope, a group that
alone decides, and what each `on_expiry` does to the task."""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from accounts_app.models import Role
from approvals_app.models import Approval, ApprovalRule, Decision, ReviewerGroup
from approvals_app.services.decisions import approval_decide, approvals_expire
from approvals_app.services.routing import approval_reassign
from approvals_app.services.rules import group_save, rule_create, scope_set
from foundations.errors import DomainError, ErrorKind
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepStatus, Task
from tests.factories import actor_of, make_user, submit
from tests.fakes.runtime import events_of
from tests.helpers import drive
from tools_app.models import DemoOrder, DemoRefund

pytestmark = pytest.mark.django_db(transaction=True)


def refund(amount: int, order: str = "B-1") -> dict[str, Any]:
    return {"tool": "issue_refund", "reason": "the parcel never arrived",
            "args": {"order_id": order, "amount_cents": amount, "reason": "lost"}}


FINAL = {"final": {"done": True}}


@pytest.fixture
def team(world):  # type: ignore[no-untyped-def]
    """Two more reviewers (ana, ben), an admin who also asks for tasks, a large order,
    and the groups `support-leads` (ana) and `finance` (ben)."""
    DemoOrder.objects.update_or_create(order_id="B-1", defaults={
        "customer": "Ada", "email": "ada@example.com", "amount_cents": 200_000})
    world.ana = make_user(world.tenant, Role.REVIEWER, "ana")
    world.ben = make_user(world.tenant, Role.REVIEWER, "ben")
    world.admin = world.users["admin"]
    world.requester = world.users["requester"]
    boss = actor_of(world.admin)
    group_save(tenant_id=world.tenant.pk, name="support-leads", data={"members": ["ana"]},
               actor=boss, create=True)
    group_save(tenant_id=world.tenant.pk, name="finance", data={"members": ["ben"]},
               actor=boss, create=True)
    world.boss = boss
    return world


def _rule(world, **data: Any) -> None:  # type: ignore[no-untyped-def]
    rule_create(tenant_id=world.tenant.pk, data=data, actor=world.boss)


def _waiting(world, script: list[Any], requester=None) -> tuple[Task, Approval]:  # type: ignore[no-untyped-def]
    task = drive(submit(world.tenant, script, requester=requester).pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    return task, Approval.objects.get(task=task, status=Decision.PENDING)


def _refused(code: str, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DomainError) as caught:
        call()
    assert caught.value.code == code, caught.value


def test_a_large_refund_needs_two_different_reviewers_and_never_the_requester(team):
    _rule(team, name="large-refunds", action="require_approval", approvals=2,
          tools=["issue_refund"], condition="args.amount_cents > 50000")
    task, approval = _waiting(team, [refund(60_000), FINAL], requester=team.admin)
    assert approval.approvals_required == 2
    assert approval.rule["name"] == "large-refunds" and approval.preview["rule"]["action"] == \
        "require_approval"

    def approve(user):  # type: ignore[no-untyped-def]
        return lambda: approval_decide(approval_id=approval.pk, tenant_id=team.tenant.pk,
                                       actor=actor_of(user), decision="approve",
                                       expected_version=task.version)

    _refused("separation_of_duties", approve(team.admin))  # the requester, an admin
    approve(team.ana)()
    after_one = Task.objects.get(pk=task.pk)
    assert after_one.status == TaskStatus.WAITING_FOR_APPROVAL
    assert after_one.version == task.version  # the second reviewer's view stays valid
    assert [g["name"] for g in Approval.objects.get(pk=approval.pk).approvals_given] == ["ana"]
    assert not DemoRefund.objects.exists()
    (recorded,) = events_of(task.pk, "approval_recorded")
    assert recorded.actor == "ana" and recorded.payload["required"] == 2

    _refused("second_approver_required", approve(team.ana))
    assert Approval.objects.get(pk=approval.pk).status == Decision.PENDING

    approve(team.ben)()
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED
    (made,) = DemoRefund.objects.all()
    assert made.amount_cents == 60_000
    assert Approval.objects.get(pk=approval.pk).decided_by_id == team.ben.pk


def test_a_small_refund_falls_back_to_the_tools_own_approval(team):
    _rule(team, name="large-refunds", action="require_approval", approvals=2,
          tools=["issue_refund"], condition="args.amount_cents > 50000")
    task, approval = _waiting(team, [refund(1000), FINAL], requester=team.requester)
    assert approval.rule is None and approval.approvals_required == 1
    approval_decide(approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ana),
                    decision="approve", expected_version=task.version)
    assert drive(task.pk).status == TaskStatus.SUCCEEDED


def test_two_approvals_take_the_arguments_as_shown(team):
    _rule(team, name="large-refunds", action="require_approval", approvals=2,
          tools=["issue_refund"], condition="args.amount_cents > 50000")
    task, approval = _waiting(team, [refund(60_000), FINAL])
    _refused("invalid", lambda: approval_decide(
        approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ana),
        decision="approve", args={"order_id": "B-1", "amount_cents": 55_000, "reason": "lost"}))
    assert Approval.objects.get(pk=approval.pk).approvals_given == []


def test_deny_tells_the_model_a_typed_refusal_and_nothing_runs(team):
    _rule(team, name="no-refunds-by-bots", action="deny", tools=["issue_refund"],
          message="refunds are made by people here")
    task = drive(submit(team.tenant, [refund(1000), FINAL]).pk)
    assert task.status == TaskStatus.SUCCEEDED
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED
    assert step.error == {"type": "denied_by_rule", "tool": "issue_refund",
                          "rule": "no-refunds-by-bots",
                          "message": "refunds are made by people here"}
    (told,) = events_of(task.pk, "invalid_decision")
    assert told.payload["error"]["type"] == "denied_by_rule"
    assert not Approval.objects.filter(task=task).exists()
    assert not DemoRefund.objects.exists()


def test_allow_lets_a_tool_run_without_its_default_approval(team):
    _rule(team, name="tiny-refunds", action="allow", tools=["issue_refund"],
          condition="args.amount_cents <= 500")
    task = drive(submit(team.tenant, [refund(400), FINAL]).pk)
    assert task.status == TaskStatus.SUCCEEDED
    assert DemoRefund.objects.get().amount_cents == 400


def test_a_call_outside_the_requesters_scope_waits_for_an_admins_grant_for_this_task_only(team):
    scope_set(tenant_id=team.tenant.pk, username=team.requester.username,
              data={"tools": ["lookup_order", "notify_customer"]}, actor=team.boss)
    script = [refund(1000), refund(2000), FINAL]
    task, authz = _waiting(team, script, requester=team.requester)
    assert authz.kind == "authorization" and "scope" in authz.preview["authorization"]
    assert not DemoRefund.objects.exists()

    _refused("not_your_request", lambda: approval_decide(
        approval_id=authz.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ana),
        decision="approve", expected_version=task.version))
    approval_decide(approval_id=authz.pk, tenant_id=team.tenant.pk, actor=team.boss,
                    decision="approve", expected_version=task.version)
    task = drive(task.pk)
    assert DemoRefund.objects.get().amount_cents == 1000  # ran only after the grant
    # the grant holds for this task: the next refund waits for its usual approval only
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    second = Approval.objects.get(task=task, status=Decision.PENDING)
    assert second.kind == "tool"

    other, again = _waiting(team, [refund(3000), FINAL], requester=team.requester)
    assert again.kind == "authorization"  # another task asks again


def test_an_agent_outside_the_requesters_scope_is_refused(team):
    scope_set(tenant_id=team.tenant.pk, username=team.requester.username,
              data={"agents": ["triage"]}, actor=team.boss)
    with pytest.raises(DomainError) as caught:
        submit(team.tenant, [FINAL], requester=team.requester)
    assert caught.value.kind == ErrorKind.FORBIDDEN and caught.value.code == "outside_scope"
    assert not Task.objects.exists()


def test_require_role_lets_only_the_groups_members_decide_and_reassign_within(team):
    _rule(team, name="refunds-to-leads", action="require_role", group="support-leads",
          tools=["issue_refund"])
    task, approval = _waiting(team, [refund(1000), FINAL])
    assert approval.group.name == "support-leads" and approval.group_required
    _refused("not_your_request", lambda: approval_decide(
        approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ben),
        decision="approve"))
    _refused("invalid", lambda: approval_reassign(
        approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ana),
        to_user="ben"))
    approval_decide(approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ana),
                    decision="approve")
    assert drive(task.pk).status == TaskStatus.SUCCEEDED


def test_reassigning_to_a_person_makes_it_theirs(team):
    task, approval = _waiting(team, [refund(1000), FINAL])
    approval_reassign(approval_id=approval.pk, tenant_id=team.tenant.pk,
                      actor=actor_of(team.ana), to_user="ben", comment="yours")
    (moved,) = events_of(task.pk, "approval_reassigned")
    assert moved.actor == "ana" and moved.payload["to_user"] == "ben"
    _refused("not_your_request", lambda: approval_decide(
        approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ana),
        decision="approve"))
    approval_decide(approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ben),
                    decision="approve")
    assert drive(task.pk).status == TaskStatus.SUCCEEDED


def test_an_agents_requests_route_to_its_group(team):
    group_save(tenant_id=team.tenant.pk, name="finance", data={"agents": ["support"]},
               actor=team.boss, create=False)
    _task, approval = _waiting(team, [refund(1000), FINAL])
    assert approval.group.name == "finance" and not approval.group_required


# --- expiry -----------------------------------------------------------------------------

def _expire(approval: Approval) -> None:
    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1))
    assert approvals_expire() >= 1


def test_on_expiry_reject_tells_the_model_and_the_task_goes_on(team):
    _rule(team, name="refunds", action="require_approval", tools=["issue_refund"], sla_s=600,
          on_expiry="reject")
    task, approval = _waiting(team, [refund(1000), FINAL])
    assert approval.expires_at is not None
    _expire(approval)
    assert Approval.objects.get(pk=approval.pk).status == Decision.EXPIRED
    assert Step.objects.get(pk=approval.step_id).status == StepStatus.REJECTED
    task = drive(task.pk)
    assert task.status == TaskStatus.SUCCEEDED and not DemoRefund.objects.exists()


def test_on_expiry_fail_fails_the_task(team):
    _rule(team, name="refunds", action="require_approval", tools=["issue_refund"], sla_s=600,
          on_expiry="fail")
    task, approval = _waiting(team, [refund(1000), FINAL])
    _expire(approval)
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.FAILED and task.failure_reason == "approval_expired"
    assert Step.objects.get(pk=approval.step_id).status == StepStatus.FAILED
    assert not DemoRefund.objects.exists()


def test_on_expiry_escalate_moves_to_the_second_group_then_to_an_operator(team):
    _rule(team, name="refunds", action="require_role", group="support-leads",
          tools=["issue_refund"], sla_s=600, on_expiry="escalate", escalate_to="finance")
    task, approval = _waiting(team, [refund(1000), FINAL])
    _expire(approval)
    moved = Approval.objects.get(pk=approval.pk)
    assert moved.status == Decision.PENDING and moved.group.name == "finance"
    assert moved.expires_at is not None and moved.expires_at > timezone.now()
    assert Task.objects.get(pk=task.pk).status == TaskStatus.WAITING_FOR_APPROVAL
    (escalated,) = events_of(task.pk, "approval_escalated")
    assert escalated.payload["to_group_id"] == ReviewerGroup.objects.get(name="finance").pk
    # now only finance decides; ana (support-leads) no longer may
    _refused("not_your_request", lambda: approval_decide(
        approval_id=approval.pk, tenant_id=team.tenant.pk, actor=actor_of(team.ana),
        decision="approve"))

    _expire(moved)  # the second expiry: the agent's own approval_on_expiry (escalate)
    task = Task.objects.get(pk=task.pk)
    assert task.status == TaskStatus.WAITING_FOR_HUMAN
    assert Approval.objects.get(pk=approval.pk).status == Decision.EXPIRED
    assert not DemoRefund.objects.exists()


def test_rules_are_checked_whole_with_field_errors(team):
    with pytest.raises(DomainError) as caught:
        _rule(team, name="Bad Name", action="require_role", approvals=3,
              condition="args.amount_cents >", risks=["huge"], escalate_to="nobody")
    fields = set(caught.value.details)
    assert {"name", "approvals", "condition", "risks", "escalate_to"} <= fields
    with pytest.raises(DomainError) as caught:
        _rule(team, name="unknown-root", action="deny", condition="inputs.x > 1")
    assert "condition" in caught.value.details
    assert not ApprovalRule.objects.exists()


def test_a_slice_reads_the_rules_once_a_second_and_sees_an_edit_after_it(
        team, django_assert_num_queries):  # type: ignore[no-untyped-def]
    from approvals_app.policy import FRESH_S, PolicyReads, gate_for, reads_kept_in

    task = submit(team.tenant, [FINAL], requester=team.requester)
    call = {"tenant_id": team.tenant.pk, "task_id": task.pk, "requester_id": team.requester.pk,
            "agent": "support", "tool": "issue_refund", "risk": "high",
            "args": {"order_id": "B-1", "amount_cents": 60_000}}
    reads = PolicyReads()
    with reads_kept_in(reads):
        with django_assert_num_queries(2):  # the scope and the rules, once
            assert gate_for(**call).action == "default"  # no rule: the tool's own approval
            assert gate_for(**call).action == "default"
        _rule(team, name="no-refunds", action="deny", tools=["issue_refund"])
        with django_assert_num_queries(0):  # within the second: what the slice read
            assert gate_for(**call).action == "default"
        for inputs in reads.kept.values():
            inputs.read_at -= FRESH_S  # a second later
        assert gate_for(**call).action == "deny"
    assert gate_for(**call).action == "deny"  # outside a slice: read every time


def test_a_tasks_key_narrows_the_gate_in_the_same_two_reads(
        team, django_assert_num_queries):  # type: ignore[no-untyped-def]
    from accounts_app.models import ApiKey
    from accounts_app.services.accounts import api_key_create
    from approvals_app.policy import PolicyReads, gate_for, reads_kept_in

    scope_set(tenant_id=team.tenant.pk, username=team.requester.username,
              data={"tools": ["lookup_order", "issue_refund"]}, actor=team.boss)
    key = ApiKey.objects.get(prefix=api_key_create(user=team.requester)[:12])
    ApiKey.objects.filter(pk=key.pk).update(tools=["lookup_order"])
    task = submit(team.tenant, [FINAL], requester=team.requester)
    call = {"tenant_id": team.tenant.pk, "task_id": task.pk, "requester_id": team.requester.pk,
            "agent": "support", "tool": "issue_refund", "risk": "high",
            "args": {"order_id": "B-1", "amount_cents": 100}}
    assert gate_for(**call).action == "default"  # the user's scope allows the refund
    # the key with its user's scope in one read, the rules in the other, once;
    # whether this task was granted the tool, at each call
    with reads_kept_in(PolicyReads()), django_assert_num_queries(2 + 2):
        gate = gate_for(**call, api_key_id=key.pk)
        assert gate_for(**call, api_key_id=key.pk).action == "authorize"
    assert gate.action == "authorize" and gate.group_id is None


def test_a_key_that_is_not_the_requesters_never_lifts_their_scope(team):  # type: ignore[no-untyped-def]
    from accounts_app.models import ApiKey
    from accounts_app.services.accounts import api_key_create
    from approvals_app.policy import scope_of

    scope_set(tenant_id=team.tenant.pk, username=team.requester.username,
              data={"agents": ["support"], "tools": ["lookup_order"]}, actor=team.boss)
    others = ApiKey.objects.get(prefix=api_key_create(user=team.ana)[:12])
    scope = scope_of(tenant_id=team.tenant.pk, requester_id=team.requester.pk,
                     api_key_id=others.pk)
    assert (scope.agents, scope.tools) == (frozenset({"support"}), frozenset({"lookup_order"}))
