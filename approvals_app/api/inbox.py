"""`GET /api/v1/inbox`: everything waiting for the caller, one list, for a team's
own front end or bot.

Each item has one shape whatever its kind:

    {"kind", "id", "key", "created_at", "expires_at",
     "task": {id, goal, agent, status, version, requester, url},
     "facts": {...what the console's card shows for this kind...},
     "actions": [{"name", "method", "url", "body": {field: meaning}}]}

`actions` are the ones the caller may take (their role, separation of duties,
a requester's own task); an item with none is not waiting for the caller and
is left out. Every action's body takes `expected_version` (the task version
the item shows), so a decision on a stale view is a 409.

A kind is an `InboxKind` in `INBOX_KINDS` (approvals, questions and
reconciliations here): another kind of request plugs in with
`register_inbox_kind` from its app's `ready`, and appears in the list and in
`counts` without a change here. Oldest first per kind (they have waited
longest), at most `limit` per kind. `counts`, per kind: how many wait for the
caller; when a kind has more than `limit` open, how many are open (the actions
of rows past the limit are not worked out).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from accounts_app.models import Role
from foundations.api_access import Access, may
from foundations.api_base import TenantAPIView
from foundations.api_errors import error_responses
from tasks_app.models import Task

from ..console.selectors import approval_card, question_card, reconciliation_card
from ..models import (
    Approval,
    Decision,
    Question,
    QuestionStatus,
    Reconciliation,
    ReconciliationStatus,
)

DEFAULT_LIMIT, MAX_LIMIT = 50, 200
RELATED = ("task", "task__agent", "task__requester", "step")
VERSION = {"expected_version": "the task version this item shows (integer)"}


@dataclass(frozen=True)
class InboxKind:
    """One kind of request: its open rows the caller may see, how one is shown, and
    what the caller may do with it (no action: not waiting for the caller)."""

    key: str  # "approval"; its section in `counts` is key + "s"
    open_rows: Callable[[Access], QuerySet[Any]]
    facts: Callable[[Any], dict[str, Any]]
    actions: Callable[[Access, Any], list[dict[str, Any]]]


INBOX_KINDS: dict[str, InboxKind] = {}


def register_inbox_kind(kind: InboxKind) -> None:
    INBOX_KINDS[kind.key] = kind


def action(name: str, url: str, body: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "method": "POST", "url": url, "body": {**body, **VERSION}}


def _own(access: Access, task: Task) -> bool:
    return task.requester_id is not None and task.requester_id == access.user_id


# --- approvals, questions, reconciliations ------------------------------------------------


def _approval_actions(access: Access, approval: Approval) -> list[dict[str, Any]]:
    if not may(access.role, "approval.decide"):
        return []
    if _own(access, approval.task) and not (approval.task.agent_snapshot or {}).get(
            "allow_self_approval"):
        return []  # separation of duties: the requester does not decide their own task
    base = f"/api/v1/approvals/{approval.pk}"
    return [
        action("approve", f"{base}/approve", {
            "comment": "optional", "args": "optional: edited arguments (re-validated)",
            "always_allow": "optional: allow this tool for the rest of the task"}),
        action("reject", f"{base}/reject", {"comment": "required: why"}),
        action("respond", f"{base}/respond", {
            "output": "required: the tool's result, instead of running it",
            "comment": "optional"}),
    ]


def _approval_facts(approval: Approval) -> dict[str, Any]:
    preview = approval.preview or {}
    return {"tool": approval.tool, "args": approval.args, "args_hash": approval.args_hash,
            "risk": preview.get("risk"), "reason": preview.get("reason"),
            "cites": preview.get("cites") or [], "step_no": approval.step.step_no,
            "evidence": approval_card(approval).evidence}


def _question_actions(access: Access, question: Question) -> list[dict[str, Any]]:
    may_answer = (access.role in (Role.REVIEWER, Role.ADMIN)
                  or (access.role == Role.REQUESTER and _own(access, question.task)))
    if not may_answer:
        return []
    return [action("answer", f"/api/v1/tasks/{question.task_id}/input",
                   {"answer": "required: the text the agent receives verbatim"})]


def _question_facts(question: Question) -> dict[str, Any]:
    answer_schema = (question.step.decision or {}).get("answer_schema")
    return {"question": question.question, "answer_schema": answer_schema,
            "step_no": question_card(question).step_no}


def _reconciliation_actions(access: Access, rec: Reconciliation) -> list[dict[str, Any]]:
    if not may(access.role, "reconciliation.resolve"):
        return []
    base = f"/api/v1/reconciliations/{rec.pk}"
    return [
        action("resolve", f"{base}/resolve", {
            "outcome": "required: succeeded, failed or retry",
            "output": "with succeeded: what the call returned", "comment": "optional"}),
        {"name": "requery", "method": "POST", "url": f"{base}/requery", "body": {}},
    ]


def _reconciliation_facts(rec: Reconciliation) -> dict[str, Any]:
    card = reconciliation_card(rec)
    return {"tool": rec.tool, "args": rec.args, "idempotency_key": rec.idempotency_key,
            "reason": rec.reason, "status_answer": card.status_answer,
            "attempts": card.attempts, "retry_is_safe": card.honours_keys,
            "step_no": card.step_no}


register_inbox_kind(InboxKind(
    key="approval",
    open_rows=lambda a: Approval.objects.filter(tenant_id=a.tenant_id, status=Decision.PENDING),
    facts=_approval_facts, actions=_approval_actions))
register_inbox_kind(InboxKind(
    key="question",
    open_rows=lambda a: Question.objects.filter(tenant_id=a.tenant_id,
                                                status=QuestionStatus.OPEN),
    facts=_question_facts, actions=_question_actions))
register_inbox_kind(InboxKind(
    key="reconciliation",
    open_rows=lambda a: Reconciliation.objects.filter(tenant_id=a.tenant_id,
                                                      status=ReconciliationStatus.OPEN),
    facts=_reconciliation_facts, actions=_reconciliation_actions))


# --- the endpoint -------------------------------------------------------------------------


def inbox_items(access: Access, *, limit: int) -> tuple[list[dict[str, Any]], dict[str, int]]:
    items: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    for kind in INBOX_KINDS.values():
        rows = kind.open_rows(access)
        if access.role == Role.REQUESTER:  # a requester sees only what waits on its own tasks
            rows = rows.filter(task__requester_id=access.user_id)
        mine = [(row, acts) for row in rows.select_related(*RELATED).order_by("id")[:limit]
                if (acts := kind.actions(access, row))]
        counts[kind.key + "s"] = len(mine) if len(mine) < limit else rows.count()
        items += [_item(kind, row, acts) for row, acts in mine]
    return items, counts


def _item(kind: InboxKind, row: Any, actions: list[dict[str, Any]]) -> dict[str, Any]:
    task: Task = row.task
    expires = getattr(row, "expires_at", None)
    return {
        "kind": kind.key, "id": row.pk, "key": f"{kind.key}-{row.pk}",
        "created_at": row.created_at.isoformat(),
        "expires_at": expires.isoformat() if expires else None,
        "task": {"id": task.pk, "goal": task.goal, "status": task.status,
                 "version": task.version, "agent": (task.agent_snapshot or {}).get("name"),
                 "requester": task.requester.get_username() if task.requester else None,
                 "url": f"/api/v1/tasks/{task.pk}"},
        "facts": kind.facts(row),
        "actions": actions,
    }


class InboxQuerySerializer(serializers.Serializer):
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT,
                                     help_text="At most this many items per kind.")


class InboxItemSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="approval, question, reconciliation, ...")
    id = serializers.IntegerField()
    key = serializers.CharField(help_text="kind-id, unique across kinds")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    task = serializers.DictField(child=serializers.JSONField())
    facts = serializers.DictField(child=serializers.JSONField(),
                                  help_text="What the console's card shows for this kind.")
    actions = serializers.ListField(child=serializers.DictField(child=serializers.JSONField()),
                                    help_text="What the caller may do: name, method, url, body.")


class InboxSerializer(serializers.Serializer):
    items = InboxItemSerializer(many=True)
    counts = serializers.DictField(child=serializers.IntegerField())
    total = serializers.IntegerField()


class InboxView(TenantAPIView):
    """Everything waiting for the caller, with the card's facts and what they may do."""

    policy = {"GET": "inbox.read"}

    @extend_schema(operation_id="inbox_list", tags=["approvals"],
                   summary="Everything waiting for the caller",
                   parameters=[InboxQuerySerializer],
                   responses={200: InboxSerializer, **error_responses()})
    def get(self, request: Request) -> Response:
        q = self.query(InboxQuerySerializer)
        items, counts = inbox_items(self.access, limit=q["limit"])
        return Response({"items": items, "counts": counts, "total": sum(counts.values())})
