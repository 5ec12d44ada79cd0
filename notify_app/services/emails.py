"""The notification e-mail: one message per reviewer, with the card's facts and
that reviewer's own signed links (`links`).

Recipients were fixed when the event happened (addresses); at sending time each
address is matched to the tenant's active reviewers and admins who have it, so
a person who lost the role meanwhile gets nothing, and every link names the one
person it was sent to. An approval's e-mail shows what the inbox card shows
(tool, arguments, the model's reason, cited evidence, risk, expiry) with
Approve, Reject and Open links; a question's shows the question with Answer and
Open links. The other notifications carry the one-line summary and the body.
"""
from __future__ import annotations

import json
from typing import Any

from django.core.mail import EmailMultiAlternatives
from django.template.loader import render_to_string

from accounts_app.models import Membership
from approvals_app.models import Approval, Decision, Question, QuestionStatus

from ..events import TITLES
from ..payloads import as_text
from .links import approval_links, question_links
from .outbox import EMAIL_ROLES


def email_messages(*, tenant_id: int, recipients: list[str],
                   body: dict[str, Any]) -> list[EmailMultiAlternatives]:
    """The messages of one e-mail delivery, one per reviewer."""
    title = TITLES.get(str(body.get("type")), str(body.get("type")))
    task = body.get("task") or {}
    subject = f"[Tether] {title}: task {task.get('id')}"
    members = (Membership.objects.select_related("user")
               .filter(tenant_id=tenant_id, role__in=EMAIL_ROLES, user__is_active=True,
                       user__email__in=recipients).order_by("user_id"))
    request = body.get("request") or {}
    approval, question = _open_request(tenant_id, request)
    messages = []
    for member in members:
        ctx: dict[str, Any] = {"body": body, "task": task, "request": request,
                               "summary": as_text(body), "title": title,
                               "raw": json.dumps(body, indent=2, ensure_ascii=False)}
        if approval is not None:
            ctx["links"] = approval_links(approval, reviewer_id=member.user_id)
        elif question is not None:
            ctx["links"] = question_links(question, reviewer_id=member.user_id)
        message = EmailMultiAlternatives(
            subject, render_to_string("notify/email.txt", ctx), None, [member.user.email])
        message.attach_alternative(render_to_string("notify/email.html", ctx), "text/html")
        messages.append(message)
    return messages


def _open_request(tenant_id: int, request: dict[str, Any]) -> tuple[Approval | None,
                                                                     Question | None]:
    """The approval or question the e-mail is about, while it is still open (a
    request decided before the e-mail left gets no decision links)."""
    if request.get("kind") == "approval" and request.get("id"):
        return (Approval.objects.filter(tenant_id=tenant_id, pk=request["id"],
                                        status=Decision.PENDING).first(), None)
    if request.get("kind") == "question" and request.get("id"):
        return (None, Question.objects.filter(tenant_id=tenant_id, pk=request["id"],
                                              status=QuestionStatus.OPEN).first())
    return None, None
