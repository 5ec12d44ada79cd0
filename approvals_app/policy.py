"""Who must look at a tool call before it runs: the tenant's approval rules and
the requester's scope, applied by the runner's policy (`tasks_app.runner.policy`)
to a call that is otherwise valid and within budget.

- The requester's scope (`RequesterScope.tools`), narrowed by the scope of the
  API key that submitted the task (`ApiKey.tools`; `scope_of`): a call of a
  tool outside it waits for an authorization (an approval of kind
  `authorization`, decided by the admins or the scope's `authorizers` group),
  granted for that task only; a deny rule still wins. The agents a caller may
  run are narrowed the same way (`agents_in_scope`, `agent_allowed`).
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

from accounts_app.models import ApiKey, Membership
from foundations.expressions import ExpressionError, compiled

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


@dataclass(frozen=True)
class Scope:
    """What a caller's tasks may do: the user's scope narrowed by their key's
    (None: no limit; an empty set: nothing, when the two share no name)."""

    agents: frozenset[str] | None = None
    tools: frozenset[str] | None = None
    authorizers_id: int | None = None  # who grants a call outside `tools` (None: the admins)

    def allows_agent(self, agent: str) -> bool:
        return self.agents is None or agent in self.agents

    def allows_tool(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools


UNLIMITED = Scope()


def narrowed(user_names: list[str], key_names: list[str]) -> frozenset[str] | None:
    """Two lists of a scope (empty: no limit) as one: the names both allow."""
    if not user_names and not key_names:
        return None
    if not key_names:
        return frozenset(user_names)
    if not user_names:
        return frozenset(key_names)
    return frozenset(user_names) & frozenset(key_names)


def scope_of(*, tenant_id: int, requester_id: int | None, api_key_id: int | None) -> Scope:
    """The effective scope of a caller, or of the tasks it submits: one read (the
    key with its user's scope, or the user's scope alone)."""
    if requester_id is None:
        return UNLIMITED
    key = (ApiKey.objects.select_related("user__requester_scope")
           .filter(pk=api_key_id, user_id=requester_id).first()
           if api_key_id is not None else None)
    if key is not None:
        user_scope = getattr(key.user, "requester_scope", None)
        key_agents, key_tools = key.agents, key.tools
    else:  # no key, or one gone: the user's own scope still holds
        user_scope = RequesterScope.objects.filter(user_id=requester_id,
                                                   tenant_id=tenant_id).first()
        key_agents, key_tools = [], []
    if user_scope is not None and user_scope.tenant_id != tenant_id:
        user_scope = None
    return Scope(
        agents=narrowed(user_scope.agents if user_scope else [], key_agents),
        tools=narrowed(user_scope.tools if user_scope else [], key_tools),
        authorizers_id=user_scope.authorizers_id if user_scope else None)


def tool_granted(*, task_id: int, tool: str) -> bool:
    """An authorization for `tool` was granted to this task (and to it only)."""
    return Approval.objects.filter(task_id=task_id, kind=AUTHORIZATION, tool=tool,
                                   status=Decision.APPROVED).exists()


FRESH_S = 1.0  # how long a slice trusts the rules and the scope it read


@dataclass
class PolicyInputs:
    """What the gate of a call reads: the tenant's enabled rules, the task's scope
    (its requester's, narrowed by its key's), and who the requester is (read
    only when a rule needs it)."""

    tenant_id: int
    requester_id: int | None
    rules: list[ApprovalRule]
    scope: Scope
    read_at: float
    _requester: Requester | None = None

    @classmethod
    def read(cls, tenant_id: int, requester_id: int | None,
             api_key_id: int | None = None) -> PolicyInputs:
        scope = scope_of(tenant_id=tenant_id, requester_id=requester_id, api_key_id=api_key_id)
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

    kept: dict[tuple[int, int | None, int | None], PolicyInputs] = field(default_factory=dict)

    def of(self, tenant_id: int, requester_id: int | None,
           api_key_id: int | None = None) -> PolicyInputs:
        whose = (tenant_id, requester_id, api_key_id)
        inputs = self.kept.get(whose)
        if inputs is None or time.monotonic() - inputs.read_at >= FRESH_S:
            inputs = self.kept[whose] = PolicyInputs.read(*whose)
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
             risk: str, args: dict[str, Any], api_key_id: int | None = None) -> Gate:
    """What the rules and the task's scope say of this call (two small reads,
    or none within a second of a slice's last ones: `PolicyReads`)."""
    reads = _reads.get()
    inputs = (reads.of(tenant_id, requester_id, api_key_id) if reads is not None
              else PolicyInputs.read(tenant_id, requester_id, api_key_id))
    scope = inputs.scope
    gate = DEFAULT
    for rule in inputs.rules:
        if rule_matches(rule, tool=tool, risk=risk, agent=agent, args=args,
                        requester=inputs.requester):
            gate = gate_of_rule(rule)
            break
    if gate.action == "deny":
        return gate
    if not scope.allows_tool(tool) and not tool_granted(task_id=task_id, tool=tool):
        return Gate("authorize", gate.rule, group_id=scope.authorizers_id,
                    group_required=True, sla_s=gate.sla_s, on_expiry=gate.on_expiry,
                    message=f"{tool} is outside the requester's scope")
    return gate


def agents_in_scope(*, tenant_id: int, requester_id: int | None,
                    api_key_id: int | None = None) -> frozenset[str] | None:
    """The agents a caller (a user, through one of their keys or not) may run;
    None: any. Every door that lists or starts agents asks this (the REST API's
    submission, A2A, MCP)."""
    return scope_of(tenant_id=tenant_id, requester_id=requester_id,
                    api_key_id=api_key_id).agents


def agent_allowed(*, tenant_id: int, requester_id: int | None, agent: str,
                  api_key_id: int | None = None) -> bool:
    """The caller's scope lets them run this agent."""
    allowed = agents_in_scope(tenant_id=tenant_id, requester_id=requester_id,
                              api_key_id=api_key_id)
    return allowed is None or agent in allowed
