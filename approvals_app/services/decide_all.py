"""Deciding every pending card of a task at once (the calls of one model
reply, each with its own card): "approve all" or "reject all".

Each card goes through the same decision as when decided alone
(`decisions.approval_decide`: its permission check, its binding to the
arguments it showed, its own transaction and event), in the reply's order.
The task runs again with the last one. A refusal (a card whose action
changed since it was shown, a missing comment for a rejection) stops there:
the cards before it stay decided, and the error names the card.
"""
from __future__ import annotations

from typing import Literal

from foundations.actors import Actor
from foundations.errors import DomainError, ErrorKind, invalid, not_found
from tasks_app.models import Task

from ..models import Approval, Decision
from .decisions import approval_decide


def approvals_decide_all(*, task_id: int, tenant_id: int, actor: Actor,
                         decision: Literal["approve", "reject"],
                         comment: str = "") -> list[Approval]:
    if not Task.objects.filter(pk=task_id, tenant_id=tenant_id).exists():
        raise not_found("Task")
    if decision not in ("approve", "reject"):
        raise invalid("invalid", "The request is not valid.", decision=["approve or reject"])
    if decision == "reject" and not comment.strip():  # before any card is decided
        raise invalid("invalid", "The request is not valid.",
                      comment=["say why, so the agent can do better"])
    cards = list(Approval.objects.filter(task_id=task_id, tenant_id=tenant_id,
                                         status=Decision.PENDING).order_by("step__step_no"))
    decided: list[Approval] = []
    for card in cards:
        try:
            decided.append(approval_decide(approval_id=card.pk, tenant_id=tenant_id, actor=actor,
                                           decision=decision, comment=comment))
        except DomainError as exc:
            if exc.kind != ErrorKind.INVALID:  # an invalid one's details are its fields
                exc.details = {**exc.details, "approval_id": card.pk,
                               "decided": [a.pk for a in decided]}
            raise
    return decided
