"""Changing a tenant's approval rules, reviewer groups and requesters' scopes.

Each change is checked whole first (every problem as a field error, nothing
written on any), then written with its audit entry in one transaction. A
rule's `version` grows with each change; the audit log keeps each version's
fields, and an approval keeps the rule as it applied (`Approval.rule`).
"""
from __future__ import annotations

import re
from typing import Any

from django.db import transaction
from django.db.models import Max

from accounts_app.models import Membership, Role
from audit_app.services import audit_record
from foundations.actors import Actor
from foundations.errors import conflict, invalid, not_found
from foundations.expressions import ExpressionError, compile_expression
from tools_app.models import Risk

from ..models import (
    Approval,
    ApprovalRule,
    Decision,
    OnExpiry,
    RequesterScope,
    ReviewerGroup,
    RuleAction,
)
from ..policy import RULE_ROOTS

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
MAX_LIST = 100
MAX_ITEM_CHARS = 100
MAX_SLA_S = 90 * 24 * 3600
RULE_FIELDS = ("position", "enabled", "action", "approvals", "group", "tools", "risks",
               "agents", "requester_roles", "requester_groups", "condition", "message",
               "sla_s", "on_expiry", "escalate_to")


def _bad(errors: dict[str, list[str]]) -> None:
    if errors:
        raise invalid("invalid", "The request is not valid.", **errors)


def _names(value: Any, field: str, errors: dict[str, list[str]],
           allowed: frozenset[str] | None = None) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_LIST or not all(
            isinstance(v, str) and 0 < len(v) <= MAX_ITEM_CHARS for v in value):
        errors.setdefault(field, []).append(
            f"a list of at most {MAX_LIST} names of 1 to {MAX_ITEM_CHARS} characters")
        return []
    unknown = sorted(set(value) - allowed) if allowed is not None else []
    if unknown:
        errors.setdefault(field, []).append(
            f"unknown: {', '.join(unknown)}; one of {', '.join(sorted(allowed or ()))}")
    return list(dict.fromkeys(value))


def _group(tenant_id: int, name: Any, field: str,
           errors: dict[str, list[str]]) -> ReviewerGroup | None:
    if name in (None, ""):
        return None
    group = (ReviewerGroup.objects.filter(tenant_id=tenant_id, name=name).first()
             if isinstance(name, str) else None)
    if group is None:
        errors.setdefault(field, []).append(f"no reviewer group named {name!r}")
    return group


def rule_audited(rule: ApprovalRule) -> dict[str, Any]:
    """The fields of a rule as the audit log and the API show them."""
    return {
        "name": rule.name, "position": rule.position, "enabled": rule.enabled,
        "action": rule.action, "approvals": rule.approvals,
        "group": rule.group.name if rule.group is not None else None,
        "tools": rule.tools, "risks": rule.risks, "agents": rule.agents,
        "requester_roles": rule.requester_roles, "requester_groups": rule.requester_groups,
        "condition": rule.condition, "message": rule.message, "sla_s": rule.sla_s,
        "on_expiry": rule.on_expiry,
        "escalate_to": rule.escalate_to.name if rule.escalate_to is not None else None,
        "version": rule.version,
    }


def _rule_checked(rule: ApprovalRule, data: dict[str, Any]) -> None:
    """Apply `data` to `rule` (unsaved), raising every problem as field errors."""
    errors: dict[str, list[str]] = {}
    tenant_id = rule.tenant_id
    unknown = sorted(set(data) - set(RULE_FIELDS) - {"name"})
    for key in unknown:
        errors[key] = ["unknown field"]
    if "name" in data:
        if not isinstance(data["name"], str) or not NAME.match(data["name"]):
            errors["name"] = ["lower-case letters, digits, _ and -, starting with a letter "
                              "(at most 64)"]
        else:
            rule.name = data["name"]
    if "position" in data:
        value = data["position"]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 10_000:
            errors["position"] = ["an integer from 0 to 10000 (rules apply in this order)"]
        else:
            rule.position = value
    if "enabled" in data:
        if not isinstance(data["enabled"], bool):
            errors["enabled"] = ["true or false"]
        else:
            rule.enabled = data["enabled"]
    if "action" in data:
        if data["action"] not in RuleAction.values:
            errors["action"] = [f"one of {', '.join(RuleAction.values)}"]
        else:
            rule.action = data["action"]
    if "approvals" in data:
        if data["approvals"] not in (1, 2) or isinstance(data["approvals"], bool):
            errors["approvals"] = ["1 or 2 (two: from two different reviewers)"]
        else:
            rule.approvals = data["approvals"]
    if "group" in data:
        group = _group(tenant_id, data["group"], "group", errors)
        rule.group = group
    if "escalate_to" in data:
        rule.escalate_to = _group(tenant_id, data["escalate_to"], "escalate_to", errors)
    lists = {"tools": None, "risks": frozenset(Risk.values), "agents": None,
             "requester_roles": frozenset(Role.values), "requester_groups": None}
    for field, allowed in lists.items():
        if field in data:
            setattr(rule, field, _names(data[field], field, errors, allowed))
    if "condition" in data:
        condition = data["condition"]
        if not isinstance(condition, str):
            errors["condition"] = ["a CEL expression, as text"]
        elif condition.strip():
            try:
                compile_expression(condition, RULE_ROOTS)
                rule.condition = condition
            except ExpressionError as exc:
                errors["condition"] = [str(exc)]
        else:
            rule.condition = ""
    if "message" in data:
        if not isinstance(data["message"], str) or len(data["message"]) > 300:
            errors["message"] = ["text of at most 300 characters"]
        else:
            rule.message = data["message"]
    if "sla_s" in data:
        value = data["sla_s"]
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SLA_S:
            errors["sla_s"] = [f"seconds, from 0 (the agent's SLA) to {MAX_SLA_S}"]
        else:
            rule.sla_s = value
    if "on_expiry" in data:
        if data["on_expiry"] not in ("", *OnExpiry.values):
            errors["on_expiry"] = [f"one of {', '.join(OnExpiry.values)}, or empty (the "
                                   "agent's approval_on_expiry)"]
        else:
            rule.on_expiry = data["on_expiry"]
    if not errors:
        _rule_consistent(rule, errors)
    _bad(errors)


def _rule_consistent(rule: ApprovalRule, errors: dict[str, list[str]]) -> None:
    """What the fields mean together."""
    asks = rule.action in (RuleAction.REQUIRE_APPROVAL, RuleAction.REQUIRE_ROLE)
    if not rule.action:
        errors["action"] = ["required"]
    if rule.action == RuleAction.REQUIRE_ROLE and rule.group_id is None:
        errors["group"] = ["require_role names the reviewer group whose members decide"]
    if not asks:
        if rule.approvals != 1:
            errors["approvals"] = ["only a rule that asks for approval counts approvals"]
        if rule.sla_s or rule.on_expiry or rule.escalate_to_id:
            errors.setdefault("on_expiry", []).append(
                "an SLA and its expiry belong to rules that ask for approval")
    if rule.escalate_to_id is not None and rule.on_expiry != OnExpiry.ESCALATE:
        errors["escalate_to"] = ["a second group is for on_expiry: escalate"]
    if rule.escalate_to_id is not None and rule.escalate_to_id == rule.group_id:
        errors["escalate_to"] = ["escalate to another group than the first"]
    if rule.action == RuleAction.DENY and not rule.message.strip():
        rule.message = f"the tenant's rule {rule.name!r} does not allow this call"


def rule_create(*, tenant_id: int, data: dict[str, Any], actor: Actor) -> ApprovalRule:
    rule = ApprovalRule(tenant_id=tenant_id, action="")
    if "name" not in data:
        _bad({"name": ["required"]})
    if "position" not in data:
        last = ApprovalRule.objects.filter(tenant_id=tenant_id).aggregate(m=Max("position"))["m"]
        rule.position = 10 if last is None else min(last + 10, 10_000)
    _rule_checked(rule, data)
    with transaction.atomic():
        if ApprovalRule.objects.filter(tenant_id=tenant_id, name=rule.name).exists():
            raise conflict("name_taken", f"a rule named {rule.name!r} exists", name=rule.name)
        rule.save()
        audit_record(actor=actor, tenant_id=tenant_id, kind="approval_rule", name=rule.name,
                     object_id=rule.pk, action="created", after=rule_audited(rule))
    return rule


def rule_of(tenant_id: int, name: str) -> ApprovalRule:
    rule = (ApprovalRule.objects.select_related("group", "escalate_to")
            .filter(tenant_id=tenant_id, name=name).first())
    if rule is None:
        raise not_found("Approval rule")
    return rule


def rule_update(*, tenant_id: int, name: str, data: dict[str, Any], actor: Actor,
                expected_version: int | None = None) -> ApprovalRule:
    with transaction.atomic():
        rule = rule_of(tenant_id, name)
        rule = ApprovalRule.objects.select_for_update(of=("self",)).select_related(
            "group", "escalate_to").get(pk=rule.pk)
        if expected_version is not None and expected_version != rule.version:
            raise conflict("stale_version", "the rule changed since it was read",
                           expected_version=expected_version, current_version=rule.version)
        if "name" in data and data["name"] != name:
            _bad({"name": ["a rule keeps its name (audit entries refer to it)"]})
        before = rule_audited(rule)
        _rule_checked(rule, data)
        if rule_audited(rule) == before:
            return rule
        rule.version += 1
        rule.save()
        audit_record(actor=actor, tenant_id=tenant_id, kind="approval_rule", name=rule.name,
                     object_id=rule.pk, action="updated", before=before,
                     after=rule_audited(rule))
    return rule


def rule_delete(*, tenant_id: int, name: str, actor: Actor) -> None:
    with transaction.atomic():
        rule = rule_of(tenant_id, name)
        audit_record(actor=actor, tenant_id=tenant_id, kind="approval_rule", name=rule.name,
                     object_id=rule.pk, action="deleted", before=rule_audited(rule))
        rule.delete()


# --- reviewer groups --------------------------------------------------------------------

def group_audited(group: ReviewerGroup) -> dict[str, Any]:
    return {"name": group.name, "agents": group.agents,
            "members": sorted(group.members.values_list("username", flat=True))}


def _members(tenant_id: int, usernames: Any, errors: dict[str, list[str]]) -> list[int]:
    names = _names(usernames, "members", errors)
    rows = dict(Membership.objects.filter(
        tenant_id=tenant_id, user__username__in=names,
        role__in=[Role.REVIEWER, Role.ADMIN]).values_list("user__username", "user_id"))
    missing = [n for n in names if n not in rows]
    if missing:
        errors.setdefault("members", []).append(
            f"not a reviewer or admin of this tenant: {', '.join(missing)}")
    return list(rows.values())


def group_save(*, tenant_id: int, name: str, data: dict[str, Any], actor: Actor,
               create: bool) -> ReviewerGroup:
    """Create a group, or replace a group's members and agents (given fields only)."""
    errors: dict[str, list[str]] = {}
    for key in sorted(set(data) - {"name", "members", "agents"}):
        errors[key] = ["unknown field"]
    if create and (not isinstance(name, str) or not NAME.match(name)):
        errors["name"] = ["lower-case letters, digits, _ and -, starting with a letter"]
    members = _members(tenant_id, data["members"], errors) if "members" in data else None
    agents = _names(data["agents"], "agents", errors) if "agents" in data else None
    _bad(errors)
    with transaction.atomic():
        if create:
            if ReviewerGroup.objects.filter(tenant_id=tenant_id, name=name).exists():
                raise conflict("name_taken", f"a group named {name!r} exists", name=name)
            group = ReviewerGroup.objects.create(tenant_id=tenant_id, name=name,
                                                 agents=agents or [])
            before = None
        else:
            group = group_of(tenant_id, name, lock=True)
            before = group_audited(group)
            if agents is not None:
                group.agents = agents
                group.save(update_fields=["agents"])
        if members is not None:
            group.members.set(members)
        audit_record(actor=actor, tenant_id=tenant_id, kind="reviewer_group", name=group.name,
                     object_id=group.pk, action="created" if create else "updated",
                     before=before, after=group_audited(group))
    return group


def group_of(tenant_id: int, name: str, *, lock: bool = False) -> ReviewerGroup:
    qs = ReviewerGroup.objects.filter(tenant_id=tenant_id, name=name)
    group = (qs.select_for_update() if lock else qs).first()
    if group is None:
        raise not_found("Reviewer group")
    return group


def group_delete(*, tenant_id: int, name: str, actor: Actor) -> None:
    with transaction.atomic():
        group = group_of(tenant_id, name, lock=True)
        used = ApprovalRule.objects.filter(tenant_id=tenant_id).filter(
            group=group).exists() or ApprovalRule.objects.filter(escalate_to=group).exists()
        if used:
            raise conflict("in_use", "rules route to this group: change them first", name=name)
        if Approval.objects.filter(group=group, status=Decision.PENDING).exists():
            raise conflict("in_use", "requests wait in this group: reassign them first",
                           name=name)
        audit_record(actor=actor, tenant_id=tenant_id, kind="reviewer_group", name=group.name,
                     object_id=group.pk, action="deleted", before=group_audited(group))
        group.delete()


# --- requesters' scopes -----------------------------------------------------------------

def scope_audited(scope: RequesterScope) -> dict[str, Any]:
    return {"user": scope.user.username, "agents": scope.agents, "tools": scope.tools,
            "authorizers": scope.authorizers.name if scope.authorizers is not None else None}


def scope_set(*, tenant_id: int, username: str, data: dict[str, Any],
              actor: Actor) -> RequesterScope:
    """Set what a user's tasks may do (empty lists: no limit)."""
    membership = (Membership.objects.select_related("user")
                  .filter(tenant_id=tenant_id, user__username=username).first())
    if membership is None:
        raise not_found("User")
    errors: dict[str, list[str]] = {}
    for key in sorted(set(data) - {"agents", "tools", "authorizers"}):
        errors[key] = ["unknown field"]
    agents = _names(data.get("agents", []), "agents", errors)
    tools = _names(data.get("tools", []), "tools", errors)
    authorizers = _group(tenant_id, data.get("authorizers"), "authorizers", errors)
    _bad(errors)
    with transaction.atomic():
        scope = RequesterScope.objects.select_for_update().filter(
            user=membership.user).first()
        before = scope_audited(scope) if scope is not None else None
        if scope is None:
            scope = RequesterScope(tenant_id=tenant_id, user=membership.user)
        scope.agents, scope.tools, scope.authorizers = agents, tools, authorizers
        scope.save()
        audit_record(actor=actor, tenant_id=tenant_id, kind="requester_scope", name=username,
                     object_id=scope.pk, action="updated" if before else "created",
                     before=before, after=scope_audited(scope))
    return scope
