"""Reads of the human loop."""
from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from tasks_app.models import Step

from .models import (
    Approval,
    Decision,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)


def pinned_human_facts(*, task_id: int, limit: int = 20,
                       retry: bool = False) -> list[dict[str, Any]]:
    """Answers, approvals and rejections of a task, oldest first, as context
    facts. A retry (`retry`) has those of the steps it inherited too: what a
    person said to the task it continues holds for it as well."""
    of_task = Q(task_id=task_id)
    if retry:
        of_task |= Q(step_id__in=inherited_origins(task_id))
    facts: list[tuple[Any, dict[str, Any]]] = []
    answered = Question.objects.filter(of_task, status=QuestionStatus.ANSWERED)
    for q in answered.order_by("-id")[:limit]:
        facts.append((q.answered_at, {"id": f"answer:{q.pk}", "kind": "answer",
                                      "text": f"Q: {q.question}\nA (verbatim): {q.answer}"}))
    for a in (Approval.objects.filter(of_task)
              .exclude(status__in=[Decision.PENDING, Decision.CANCELED]).order_by("-id")[:limit]):
        text = f"{a.status.capitalize()} call of {a.tool}"
        if a.comment:
            text += f": {a.comment}"
        if a.args_diff:
            text += f" (arguments edited: {a.args_diff})"
        facts.append((a.decided_at, {"id": f"approval:{a.pk}", "kind": a.status, "text": text}))
    facts.sort(key=lambda f: (f[0] is None, f[0]))
    return [f for _, f in facts][-limit:]


def inherited_origins(task_id: int) -> list[int]:
    """The steps a retry's inherited steps copy, followed back to the task that
    ran each (a retry of a retry copies copies): one read per link of the chain."""
    parents = list(Step.objects.filter(task_id=task_id, inherited_from__isnull=False)
                   .values_list("inherited_from_id", flat=True))
    origins: list[int] = []
    while parents:
        rows = list(Step.objects.filter(pk__in=parents).values_list("pk", "inherited_from_id"))
        origins += [pk for pk, parent in rows if parent is None]
        parents = [parent for _, parent in rows if parent is not None]
    return origins


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
    question = (Question.objects.filter(task_id=task_id, status=QuestionStatus.OPEN)
                .order_by("-id").first())
    if question is not None:
        return {"kind": "question", "id": question.pk, "question": question.question}
    approval = (Approval.objects.filter(task_id=task_id, status=Decision.PENDING)
                .order_by("-id").first())
    if approval is not None:
        return {"kind": "approval", "id": approval.pk, "tool": approval.tool}
    rec = (Reconciliation.objects.filter(task_id=task_id, status=ReconciliationStatus.OPEN)
           .order_by("-id").first())
    if rec is not None:
        return {"kind": "reconciliation", "id": rec.pk, "tool": rec.tool}
    return None


def pending_approvals_with_sla(*, now: Any) -> QuerySet[Approval]:
    """Pending approvals with an SLA that has not run out yet, the soonest to expire first."""
    return (Approval.objects.filter(status=Decision.PENDING, expires_at__isnull=False,
                                    expires_at__gt=now)
            .only("id", "tenant_id", "task_id", "created_at", "expires_at")
            .order_by("expires_at"))
