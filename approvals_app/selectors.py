"""Reads of the human loop."""
from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from accounts_app.models import Membership, Role
from foundations.actors import Actor
from foundations.errors import conflict, not_found
from tasks_app.models import Step

from .gates import AUTHORIZATION
from .models import (
    Approval,
    Decision,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
    ReviewerGroup,
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
    qs = Approval.objects.filter(tenant_id=tenant_id).select_related(
        "step", "decided_by", "group", "assignee")
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


def in_group(group_id: int, user_id: int | None) -> bool:
    return user_id is not None and ReviewerGroup.objects.filter(
        pk=group_id, members__id=user_id).exists()


def may_decide(approval: Approval, actor: Actor) -> bool:
    """Whether `actor` (a reviewer or an admin) may decide `approval`: an
    authorization, an admin or its group's member; a request assigned to a
    person, that person (or an admin, unless only a group may decide); a
    request only a group decides (`require_role`), its members; else anyone."""
    is_admin = actor.role == Role.ADMIN
    if approval.kind == AUTHORIZATION:
        return is_admin or (approval.group_id is not None
                            and in_group(approval.group_id, actor.user_id))
    if approval.assignee_id is not None:
        return actor.user_id == approval.assignee_id or (
            is_admin and not approval.group_required)
    if approval.group_required:
        return approval.group_id is not None and in_group(approval.group_id, actor.user_id)
    return True


def group_ids_of(user_id: int | None) -> list[int]:
    if user_id is None:
        return []
    return list(ReviewerGroup.objects.filter(members__id=user_id).values_list("id", flat=True))


INBOX_FILTERS = ("all", "mine", "groups")


def approvals_for_inbox(qs: QuerySet[Approval], *, user_id: int | None,
                        which: str) -> QuerySet[Approval]:
    """The inbox's filters: `mine` (assigned to me), `groups` (routed to a group
    of mine, or assigned to me), `all`."""
    if which == "mine":
        return qs.filter(assignee_id=user_id) if user_id is not None else qs.none()
    if which == "groups":
        return qs.filter(Q(group_id__in=group_ids_of(user_id)) | Q(assignee_id=user_id))
    return qs


def routed_reviewers(*, task_id: int, context: dict[str, Any]) -> list[int] | None:
    """Who a notification about a request goes to, when the request is routed (a
    group, a person, an authorization): their user ids; None when it is not
    about a routed approval (everyone who reviews is told)."""
    pending = Approval.objects.filter(task_id=task_id)
    if "approval_id" in context:
        approval = pending.filter(pk=context["approval_id"]).first()
    elif "step_no" in context:
        approval = pending.filter(step__step_no=context["step_no"],
                                  status=Decision.PENDING).first()
    else:
        return None
    if approval is None or (approval.group_id is None and approval.assignee_id is None
                            and approval.kind != AUTHORIZATION):
        return None
    return reviewers_to_notify(approval)


def reviewers_to_notify(approval: Approval) -> list[int]:
    """Who a notification of `approval` goes to (user ids): its assignee, else its
    group's members, else every reviewer and admin of the tenant (an
    authorization without a group: the admins)."""
    if approval.assignee_id is not None:
        return [approval.assignee_id]
    if approval.group_id is not None:
        return list(ReviewerGroup.members.through.objects.filter(
            reviewergroup_id=approval.group_id).values_list("user_id", flat=True))
    roles = [Role.ADMIN] if approval.kind == AUTHORIZATION else [Role.ADMIN, Role.REVIEWER]
    return list(Membership.objects.filter(tenant_id=approval.tenant_id, role__in=roles)
                .values_list("user_id", flat=True))


def default_group_id(*, tenant_id: int, agent: str) -> int | None:
    """The group an agent's requests route to when no rule names one. Read in
    Python: a tenant has a few groups, and SQLite has no JSON containment."""
    groups = (ReviewerGroup.objects.filter(tenant_id=tenant_id).exclude(agents=[])
              .order_by("name").values_list("id", "agents"))
    return next((group_id for group_id, agents in groups if agent in (agents or [])), None)


def pending_approval_locked(*, approval_id: int, tenant_id: int) -> Approval:
    """The prelude of every act on an approval (deciding it, reassigning it):
    the tenant's approval, locked for this transaction (one act wins), still
    pending; else the refusal (404, or 409 saying what it became)."""
    approval = (Approval.objects.select_for_update()
                .filter(pk=approval_id, tenant_id=tenant_id).first())
    if approval is None:
        raise not_found("Approval")
    if approval.status != Decision.PENDING:
        raise conflict("already_decided", f"this approval is already {approval.status}",
                       status=approval.status)
    return approval

