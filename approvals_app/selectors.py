"""Reads of the human loop."""
from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from .models import Approval, Question, Reconciliation


def pinned_human_facts(*, task_id: int, limit: int = 20) -> list[dict[str, Any]]:
    """Answers, approvals and rejections of a task, oldest first, as context facts."""
    facts: list[tuple[Any, dict[str, Any]]] = []
    for q in Question.objects.filter(task_id=task_id, status="answered").order_by("-id")[:limit]:
        facts.append((q.answered_at, {"id": f"answer:{q.pk}", "kind": "answer",
                                      "text": f"Q: {q.question}\nA (verbatim): {q.answer}"}))
    for a in (Approval.objects.filter(task_id=task_id)
              .exclude(status__in=["pending", "canceled"]).order_by("-id")[:limit]):
        text = f"{a.status.capitalize()} call of {a.tool}"
        if a.comment:
            text += f": {a.comment}"
        if a.args_diff:
            text += f" (arguments edited: {a.args_diff})"
        facts.append((a.decided_at, {"id": f"approval:{a.pk}", "kind": a.status, "text": text}))
    facts.sort(key=lambda f: (f[0] is None, f[0]))
    return [f for _, f in facts][-limit:]


def approvals_of_tenant(*, tenant_id: int, status: str | None = None,
                        task_id: int | None = None) -> QuerySet[Approval]:
    qs = Approval.objects.filter(tenant_id=tenant_id).select_related("step", "decided_by")
    if status:
        qs = qs.filter(status=status)
    if task_id is not None:
        qs = qs.filter(task_id=task_id)
    return qs


def reconciliations_of_tenant(*, tenant_id: int, status: str | None = None,
                              task_id: int | None = None) -> QuerySet[Reconciliation]:
    qs = Reconciliation.objects.filter(tenant_id=tenant_id).select_related("step", "resolved_by")
    if status:
        qs = qs.filter(status=status)
    if task_id is not None:
        qs = qs.filter(task_id=task_id)
    return qs


def questions_of_tenant(*, tenant_id: int, status: str | None = None,
                        task_id: int | None = None) -> QuerySet[Question]:
    qs = Question.objects.filter(tenant_id=tenant_id).select_related("step", "answered_by")
    if status:
        qs = qs.filter(status=status)
    if task_id is not None:
        qs = qs.filter(task_id=task_id)
    return qs


def open_request_of(*, task_id: int) -> dict[str, Any] | None:
    """What a waiting task waits on: its open question, pending approval or open reconciliation."""
    question = Question.objects.filter(task_id=task_id, status="open").order_by("-id").first()
    if question is not None:
        return {"kind": "question", "id": question.pk, "question": question.question}
    approval = Approval.objects.filter(task_id=task_id, status="pending").order_by("-id").first()
    if approval is not None:
        return {"kind": "approval", "id": approval.pk, "tool": approval.tool}
    rec = Reconciliation.objects.filter(task_id=task_id, status="open").order_by("-id").first()
    if rec is not None:
        return {"kind": "reconciliation", "id": rec.pk, "tool": rec.tool}
    return None


def pending_approvals_with_sla(*, now: Any) -> QuerySet[Approval]:
    """Pending approvals with an SLA that has not run out yet, the soonest to expire first."""
    return (Approval.objects.filter(status="pending", expires_at__isnull=False,
                                    expires_at__gt=now)
            .only("id", "tenant_id", "task_id", "created_at", "expires_at")
            .order_by("expires_at"))
