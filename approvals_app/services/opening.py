"""Opening approvals, questions and reconciliations. Called by the runner inside
the transaction that moves the task into the matching WAITING_* state."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from tasks_app.keys import canonical_json, sha256_hex

from ..gates import AUTHORIZATION, DEFAULT, Gate
from ..models import Approval, Decision, Question, Reconciliation
from ..selectors import default_group_id


def args_hash(args: dict[str, Any]) -> str:
    return sha256_hex(canonical_json(args))


def approval_open(
    *,
    task_id: int,
    tenant_id: int,
    step_id: int,
    tool: str,
    args: dict[str, Any],
    risk: str,
    reason: str,
    cites: list[str],
    task_version: int,
    sla_s: int,
    confidence: float | None = None,
    min_confidence: float | None = None,
    final: bool = False,
    gate: Gate = DEFAULT,
    agent: str = "",
) -> Approval:
    """The approval a call waits for: with the rule that asked for it (`gate`),
    routed to the rule's group, else to the agent's (`ReviewerGroup.agents`).
    `confidence`: the model's, shown on the card (with the threshold it is below,
    when that is why the call waits); `final`: a final answer held for review."""
    sla_s = gate.sla_s or sla_s
    group_id = gate.group_id
    if group_id is None and not gate.group_required and agent:
        group_id = default_group_id(tenant_id=tenant_id, agent=agent)
    preview: dict[str, Any] = {"tool": tool, "args": args, "risk": risk, "reason": reason,
                               "cites": cites}
    if gate.rule is not None:
        preview["rule"] = gate.rule
    if gate.action == "authorize":
        preview["authorization"] = gate.message
    if confidence is not None:
        preview["confidence"] = confidence
    if min_confidence is not None:
        preview["min_confidence"] = min_confidence
    if final:
        preview["final"] = True
    return Approval.objects.create(
        tenant_id=tenant_id,
        task_id=task_id,
        step_id=step_id,
        tool=tool,
        args=args,
        args_hash=args_hash(args),
        task_version=task_version,
        preview=preview,
        expires_at=timezone.now() + timedelta(seconds=sla_s) if sla_s else None,
        kind=AUTHORIZATION if gate.action == "authorize" else "tool",
        rule=gate.rule,
        approvals_required=gate.approvals,
        group_id=group_id,
        group_required=gate.group_required,
        sla_s=sla_s,
        on_expiry=gate.on_expiry,
        escalate_to_id=gate.escalate_to_id,
    )


def question_open(
    *, task_id: int, tenant_id: int, step_id: int, question: str, task_version: int,
    expires_at: datetime | None = None, on_expiry: str = "",
) -> Question:
    return Question.objects.create(
        tenant_id=tenant_id,
        task_id=task_id,
        step_id=step_id,
        question=question,
        task_version=task_version,
        expires_at=expires_at,
        on_expiry=on_expiry,
    )


def reconciliation_open(
    *,
    task_id: int,
    tenant_id: int,
    step_id: int,
    tool: str,
    args: dict[str, Any],
    idempotency_key: str,
    status_answer: dict[str, Any] | None,
    reason: str,
    task_version: int,
) -> Reconciliation:
    return Reconciliation.objects.create(
        tenant_id=tenant_id,
        task_id=task_id,
        step_id=step_id,
        tool=tool,
        args=args,
        idempotency_key=idempotency_key,
        status_answer=status_answer,
        reason=reason,
        task_version=task_version,
    )


def always_allowed_tools(*, task_id: int) -> frozenset[str]:
    """Tools a reviewer chose to "always allow" for this task (recorded decisions)."""
    return frozenset(
        Approval.objects.filter(
            task_id=task_id, always_allow=True, status=Decision.APPROVED, kind="tool"
        ).values_list("tool", flat=True)
    )


def approvals_rebind(*, task_id: int, task_version: int) -> None:
    """The pending cards of a reply's calls, shown at the version the task
    waits at (their siblings' calls moved it while they were open)."""
    Approval.objects.filter(task_id=task_id, status=Decision.PENDING).update(
        task_version=task_version)
