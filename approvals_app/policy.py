"""Who must look at a tool call before it runs: the tenant's approval rules and
the requester's scope, applied by the runner's policy (`tasks_app.runner.policy`)
to a call that is otherwise valid and within budget.

- The requester's scope (`RequesterScope.tools`): a call of a tool outside it
  waits for an authorization (an approval of kind `authorization`, decided by
  the admins or the scope's `authorizers` group), granted for that task only;
  a deny rule still wins.
- The rules, in order: the first whose match lists and condition fit decides
  (`allow`, `require_approval` with 1 or 2 reviewers, `require_role`: only a
  group's members, `deny`: the model is told why). A list left empty matches
  anything. A condition that fails to evaluate (a missing argument, say)
  counts as a match for every action but `allow`: a broken rule never lets a
  call through that it was written to stop.
- No rule: the tool's own `requires_approval` decides (`Gate.default`).

A runner slice reads the rules and the scope once per second at most
(`PolicyReads`, kept in its memo): a step of instant tools would otherwise
spend half its statements on them, while a step that waits on the network for
hundreds of milliseconds reads them afresh anyway. An edit applies to the
next call after that second.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from tasks_app.models import Membership
from workflows_app.expressions import ExpressionError, compiled

from .gates import AUTHORIZATION, DEFAULT, Gate
from .models import Approval, ApprovalRule, Decision, RequesterScope, ReviewerGroup, RuleAction

RULE_ROOTS = frozenset({"args", "tool", "agent", "risk", "requester"})


def rule_summary(rule: ApprovalRule) -> dict[str, Any]:
    return {"id": rule.pk, "name": rule.name, "position": rule.position,
            "version": rule.version, "action": rule.action}


@dataclass(frozen=True)
class Requester:
    """Who asked for the task, as rules see it."""

    user_id: int | None
    role: str
    groups: frozenset[str]

    def as_activation(self) -> dict[str, Any]:
        return {"role": self.role, "groups": sorted(self.groups)}


def requester_of(user_id: int | None) -> Requester:
    if user_id is None:
        return Requester(None, "", frozenset())
    role = Membership.objects.filter(user_id=user_id).values_list("role", flat=True).first()
    groups = ReviewerGroup.objects.filter(members__id=user_id).values_list("name", flat=True)
    return Requester(user_id, role or "", frozenset(groups))


def rule_matches(rule: ApprovalRule, *, tool: str, risk: str, agent: str,
                 args: dict[str, Any], requester: Requester) -> bool:
    if rule.tools and tool not in rule.tools:
        return False
    if rule.risks and risk not in rule.risks:
        return False
    if rule.agents and agent not in rule.agents:
        return False
    if rule.requester_roles and requester.role not in rule.requester_roles:
        return False
    if rule.requester_groups and not requester.groups & set(rule.requester_groups):
        return False
    if not rule.condition.strip():
        return True
    activation = {"args": args, "tool": tool, "agent": agent, "risk": risk,
                  "requester": requester.as_activation()}
    try:
        return compiled(rule.condition, RULE_ROOTS).evaluate(activation) is True
    except ExpressionError:
        return rule.action != RuleAction.ALLOW  # fail closed (module docstring)


def gate_of_rule(rule: ApprovalRule) -> Gate:
    summary = rule_summary(rule)
    if rule.action == RuleAction.ALLOW:
        return Gate("run", summary)
    if rule.action == RuleAction.DENY:
        return Gate("deny", summary, message=rule.message or f"denied by the rule {rule.name!r}")
    return Gate("approve", summary, approvals=max(1, rule.approvals), group_id=rule.group_id,
                group_required=rule.action == RuleAction.REQUIRE_ROLE, sla_s=rule.sla_s,
                on_expiry=rule.on_expiry, escalate_to_id=rule.escalate_to_id)


def tool_granted(*, task_id: int, tool: str) -> bool:
    """An authorization for `tool` was granted to this task (and to it only)."""
    return Approval.objects.filter(task_id=task_id, kind=AUTHORIZATION, tool=tool,
                                   status=Decision.APPROVED).exists()


FRESH_S = 1.0  # how long a slice trusts the rules and the scope it read


@dataclass
class PolicyInputs:
    """What the gate of a call reads: the tenant's enabled rules, the requester's
    scope, and who the requester is (read only when a rule needs it)."""

    tenant_id: int
    requester_id: int | None
    rules: list[ApprovalRule]
    scope: RequesterScope | None
    read_at: float
    _requester: Requester | None = None

    @classmethod
    def read(cls, tenant_id: int, requester_id: int | None) -> PolicyInputs:
        scope = (RequesterScope.objects.filter(user_id=requester_id, tenant_id=tenant_id).first()
                 if requester_id is not None else None)
        rules = list(ApprovalRule.objects.filter(tenant_id=tenant_id, enabled=True))
        return cls(tenant_id, requester_id, rules, scope, time.monotonic())

    @property
    def requester(self) -> Requester:
        if self._requester is None:
            self._requester = requester_of(self.requester_id)
        return self._requester


@dataclass
class PolicyReads:
    """The policy inputs a slice read, trusted for `FRESH_S`."""

    kept: dict[tuple[int, int | None], PolicyInputs] = field(default_factory=dict)

    def of(self, tenant_id: int, requester_id: int | None) -> PolicyInputs:
        inputs = self.kept.get((tenant_id, requester_id))
        if inputs is None or time.monotonic() - inputs.read_at >= FRESH_S:
            inputs = self.kept[(tenant_id, requester_id)] = PolicyInputs.read(tenant_id,
                                                                             requester_id)
        return inputs


_reads: ContextVar[PolicyReads | None] = ContextVar("approval_policy_reads", default=None)


@contextmanager
def reads_kept_in(reads: PolicyReads) -> Iterator[None]:
    """Within the block (a runner step, and the database phases it hands to
    threads, which copy its context), `gate_for` reads through `reads`."""
    token = _reads.set(reads)
    try:
        yield
    finally:
        _reads.reset(token)


def gate_for(*, tenant_id: int, task_id: int, requester_id: int | None, agent: str, tool: str,
             risk: str, args: dict[str, Any]) -> Gate:
    """What the rules and the requester's scope say of this call (two small reads,
    or none within a second of a slice's last ones: `PolicyReads`)."""
    reads = _reads.get()
    inputs = (reads.of(tenant_id, requester_id) if reads is not None
              else PolicyInputs.read(tenant_id, requester_id))
    scope = inputs.scope
    gate = DEFAULT
    for rule in inputs.rules:
        if rule_matches(rule, tool=tool, risk=risk, agent=agent, args=args,
                        requester=inputs.requester):
            gate = gate_of_rule(rule)
            break
    if gate.action == "deny":
        return gate
    if scope is not None and scope.tools and tool not in scope.tools \
            and not tool_granted(task_id=task_id, tool=tool):
        return Gate("authorize", gate.rule, group_id=scope.authorizers_id,
                    group_required=True, sla_s=gate.sla_s, on_expiry=gate.on_expiry,
                    message=f"{tool} is outside the requester's scope")
    return gate


def agent_allowed(*, tenant_id: int, requester_id: int | None, agent: str) -> bool:
    """The requester's scope lets them run this agent."""
    if requester_id is None:
        return True
    scope = RequesterScope.objects.filter(user_id=requester_id, tenant_id=tenant_id).first()
    return scope is None or not scope.agents or agent in scope.agents
