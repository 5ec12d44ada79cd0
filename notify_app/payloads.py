"""The body of a notification: what every channel sends, composed once.

``{id, type, created_at, tenant, task: {id, status, goal, agent, url}, request: {...}}``

`request` says what the person is asked for: the approval (tool, arguments,
risk, reason, when it expires), the question, the reconciliation, or why the
task was escalated or failed; with the console address to act on it. The body
is composed from the rows the causing transaction wrote (so it is composed
after that commit, at the first send, never before) and then frozen on the
notification. `task.status` is the status the event moved the task to.

`as_text` is the one-line summary e-mails and Slack-style webhooks carry.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings

from approvals_app.selectors import (
    approvals_of_tenant,
    questions_of_tenant,
    reconciliations_of_tenant,
)
from tasks_app.selectors import task_of_tenant

from .events import TITLES
from .models import EventType, Notification


def link(path: str) -> str:
    return f"{settings.TETHER_PUBLIC_URL}{path}"


def compose(notification: Notification) -> dict[str, Any]:
    context = notification.context or {}
    task = task_of_tenant(notification.tenant_id, notification.task_id)
    agent = (task.agent_snapshot or {}).get("name") if task is not None else None
    task_part: dict[str, Any] = {"id": notification.task_id, "url": link(
        f"/tasks/{notification.task_id}/")}
    if task is not None:
        task_part.update(status=context.get("to") or task.status, goal=task.goal,
                         agent=agent)
    return {
        "id": str(notification.uid),
        "type": notification.type,
        "created_at": notification.created_at.isoformat(),
        "tenant": notification.tenant.name,
        "task": task_part,
        "request": _request(notification, context),
    }


def _request(notification: Notification, context: dict[str, Any]) -> dict[str, Any]:
    tenant_id, task_id, kind = notification.tenant_id, notification.task_id, notification.type
    inbox = link("/inbox/")
    step_no = int(context.get("step_no") or 0)
    if kind in (EventType.APPROVAL_REQUESTED, EventType.APPROVAL_SLA_WARNING):
        approvals = approvals_of_tenant(tenant_id=tenant_id, task_id=task_id)
        approval = (approvals.filter(pk=context["approval_id"]).first()
                    if "approval_id" in context
                    else approvals.filter(step__step_no=step_no).order_by("-id").first())
        if approval is None:
            return {"kind": "approval", "url": inbox}
        preview = approval.preview or {}
        part = {"kind": "approval", "id": approval.pk, "status": approval.status,
                "tool": approval.tool, "args": approval.args, "risk": preview.get("risk"),
                "reason": preview.get("reason"), "cites": preview.get("cites") or [],
                "step_no": approval.step.step_no,
                "created_at": approval.created_at.isoformat(),
                "expires_at": approval.expires_at.isoformat() if approval.expires_at else None,
                "kind_of_request": approval.kind, "rule": approval.rule,
                "approvals_required": approval.approvals_required,
                "group": approval.group.name if approval.group is not None else None,
                "url": inbox}
        if kind == EventType.APPROVAL_SLA_WARNING:
            part["sla_elapsed"] = context.get("sla_elapsed")
        return part
    if kind == EventType.QUESTION_ASKED:
        question = (questions_of_tenant(tenant_id=tenant_id, task_id=task_id)
                    .filter(step__step_no=step_no).order_by("-id").first())
        return {"kind": "question", "id": question.pk if question else None,
                "question": question.question if question else context.get("question"),
                "step_no": step_no, "url": inbox}
    if kind == EventType.RECONCILIATION_OPENED:
        rec = (reconciliations_of_tenant(tenant_id=tenant_id, task_id=task_id)
               .filter(step__step_no=step_no).order_by("-id").first())
        return {"kind": "reconciliation", "id": rec.pk if rec else None,
                "tool": rec.tool if rec else context.get("tool"),
                "reason": rec.reason if rec else "", "step_no": step_no, "url": inbox}
    if kind == EventType.SPEND_WARNING:
        return {"kind": "spend", "period": context.get("period"), "limit": context.get("limit"),
                "spent": context.get("spent"), "url": link("/")}
    # escalated or failed: the event says why
    return {"kind": "escalation" if kind == EventType.TASK_ESCALATED else "failure",
            "event": context.get("event"), "reason": context.get("reason"),
            "detail": context.get("detail"), "url": link(f"/tasks/{task_id}/")}


def as_text(body: dict[str, Any]) -> str:
    """One line a person reads: what happened, on which task, where to act."""
    request, task = body.get("request") or {}, body.get("task") or {}
    what = TITLES.get(body.get("type", ""), body.get("type", ""))
    detail = {
        "approval": f"call of {request.get('tool')}",
        "question": f"\u201c{request.get('question')}\u201d",
        "reconciliation": f"the outcome of {request.get('tool')} is unknown",
        "spend": f"${request.get('spent')} of ${request.get('limit')} this {request.get('period')}",
    }.get(request.get("kind", ""), str(request.get("reason") or ""))
    goal = str(task.get("goal") or "")[:120]
    return (f"[Tether/{body.get('tenant')}] {what}: task {task.get('id')} ({goal}): "
            f"{detail} {request.get('url') or task.get('url')}")


CLOUDEVENTS_CONTENT_TYPE = "application/cloudevents+json"


def as_cloudevent(body: dict[str, Any]) -> dict[str, Any]:
    """The body as a CloudEvents 1.0 event in structured JSON mode: the event's
    id is the notification's (the same for every webhook and every attempt:
    what a receiver deduplicates on), its type `dev.tether.<event type>`, its
    subject the task, and the Tether body its data."""
    task = body.get("task") or {}
    return {
        "specversion": "1.0",
        "id": body["id"],
        "source": f"urn:tether:tenant:{body['tenant']}",
        "type": f"dev.tether.{body['type']}",
        "subject": f"tasks/{task.get('id')}",
        "time": body["created_at"],
        "datacontenttype": "application/json",
        "data": body,
    }
