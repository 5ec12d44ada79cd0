"""Signed decision links: the approve, reject and answer links of a notification e-mail.

A link carries a token made with Django's signing (`signing.dumps`, HMAC-SHA256
keyed with `SECRET_KEY` and this module's salt). It names the reviewer it was
sent to, the request (approval or question), the task version the request was
opened at, the approval's arguments' hash, the action, and when it stops
working (the approval's expiry, and never later than
`TETHER_DECISION_LINK_MAX_AGE_S` after it was signed). Rotating `SECRET_KEY`
while keeping the former key in `SECRET_KEY_FALLBACKS` keeps the links already
sent working; dropping it from the fallbacks revokes them all.

Following a link never decides: it opens a confirmation page (login required),
whose form posts back the same token; `link_check` runs on both, and the
decision service checks again inside its transaction. A link works once: the
decision it takes closes the request, and a closed request refuses every link
to it. Refused, with a reason the page states, and nothing changed: a link
that does not verify (tampered, or signed with a retired key), one that ran
out, one followed by someone other than its reviewer (forwarded), one whose
reviewer no longer decides in that tenant, one whose request is no longer open
(replayed, or decided elsewhere), one whose task moved on, one whose action's
arguments changed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core import signing

from accounts_app.models import Membership
from approvals_app.models import (
    Approval,
    Decision,
    DecisionChannel,
    Question,
    QuestionStatus,
)
from approvals_app.services.answers import task_provide_input
from approvals_app.services.decisions import DECIDERS, approval_decide
from foundations.actors import Actor
from tasks_app.models import Task

from ..payloads import link

SALT = "tether.notify.decision-link"
ACTIONS = {"approval": ("approve", "reject"), "question": ("answer",)}


@dataclass(frozen=True)
class Claim:
    """What a link says: who may use it, on what, to do what, until when."""

    reviewer_id: int
    kind: str  # approval | question
    request_id: int
    task_version: int
    args_hash: str  # the approval's; "" for a question
    action: str  # approve | reject | answer
    expires_at: float | None  # unix seconds

    def as_payload(self) -> dict[str, Any]:
        return {"r": self.reviewer_id, "k": self.kind, "i": self.request_id,
                "v": self.task_version, "h": self.args_hash, "a": self.action,
                "e": self.expires_at}


class LinkRefused(Exception):
    """Why a link cannot be used; `status` is the page's HTTP status."""

    def __init__(self, reason: str, message: str, status: int) -> None:
        super().__init__(message)
        self.reason, self.message, self.status = reason, message, status


@dataclass(frozen=True)
class Usable:
    """A link that checked out: its claim, the open request, its task, who uses it."""

    claim: Claim
    request: Approval | Question
    task: Task
    actor: Actor


def approval_links(approval: Approval, *, reviewer_id: int) -> dict[str, str]:
    """The approve and reject links of `approval` for one reviewer."""
    expires = approval.expires_at.timestamp() if approval.expires_at else None
    return {action: link_url(Claim(reviewer_id, "approval", approval.pk, approval.task_version,
                                   approval.args_hash, action, expires))
            for action in ACTIONS["approval"]}


def question_links(question: Question, *, reviewer_id: int) -> dict[str, str]:
    expires = question.expires_at.timestamp() if question.expires_at else None
    return {"answer": link_url(Claim(reviewer_id, "question", question.pk,
                                     question.task_version, "", "answer", expires))}


def link_url(claim: Claim) -> str:
    token = signing.dumps(claim.as_payload(), salt=SALT, compress=True)
    return link(f"/act/{token}/")


def link_check(token: str, *, user: Any) -> Usable:
    """The link's claim when `user` may use it now; `LinkRefused` saying why not."""
    claim = _verified(token)
    if claim.reviewer_id != user.pk:
        raise LinkRefused("forwarded", "This link was sent to another reviewer. Links in "
                          "Tether's e-mails work only for the person they were sent to; "
                          "open the inbox to decide yourself.", 403)
    membership = Membership.objects.filter(user_id=user.pk).first()
    request = _request(claim, membership.tenant_id) if membership is not None else None
    if request is None or membership is None:
        raise LinkRefused("not_found", "This request does not exist in your tenant.", 404)
    task = Task.objects.get(pk=request.task_id)
    answering_own = (claim.kind == "question" and task.requester_id == user.pk)
    if membership.role not in DECIDERS and not answering_own:
        raise LinkRefused("role", "You no longer have a reviewer's role in this tenant, so "
                          "this link no longer works.", 403)
    _still_open(claim, request)
    now = time.time()
    ends = request.expires_at.timestamp() if request.expires_at else None
    if any(at is not None and at < now for at in (claim.expires_at, ends)):
        raise LinkRefused("expired", "This link expired with its request.", 410)
    if task.version != claim.task_version:
        raise LinkRefused("moved_on", "The task has moved on since this e-mail was sent; "
                          "nothing was decided. Open the task to see where it stands.", 409)
    if isinstance(request, Approval) and request.args_hash != claim.args_hash:
        raise LinkRefused("changed", "The action changed since this e-mail was sent; "
                          "nothing was decided.", 409)
    actor = Actor(name=user.get_username(), role=membership.role, user_id=user.pk)
    return Usable(claim=claim, request=request, task=task, actor=actor)


def link_use(usable: Usable, *, comment: str = "", answer: str = "") -> Approval | Question:
    """Take the link's decision through the same services as the console, recorded
    as taken by e-mail, at the version the link names."""
    claim = usable.claim
    if claim.kind == "approval":
        return approval_decide(
            approval_id=claim.request_id, tenant_id=usable.task.tenant_id, actor=usable.actor,
            decision="approve" if claim.action == "approve" else "reject", comment=comment,
            expected_version=claim.task_version, channel=DecisionChannel.EMAIL)
    task_provide_input(task_id=usable.task.pk, answer=answer, actor=usable.actor,
                       expected_version=claim.task_version, channel=DecisionChannel.EMAIL)
    return Question.objects.get(pk=claim.request_id)


def _verified(token: str) -> Claim:
    try:
        data = signing.loads(token, salt=SALT, max_age=timedelta(
            seconds=settings.TETHER_DECISION_LINK_MAX_AGE_S))
    except signing.SignatureExpired:
        raise LinkRefused("expired", "This link is too old to be used.", 410) from None
    except signing.BadSignature:
        raise LinkRefused("tampered", "This link is not valid: it was changed, cut short, or "
                          "signed with a key Tether no longer accepts.", 400) from None
    try:
        claim = Claim(reviewer_id=int(data["r"]), kind=str(data["k"]), request_id=int(data["i"]),
                      task_version=int(data["v"]), args_hash=str(data["h"]),
                      action=str(data["a"]),
                      expires_at=None if data["e"] is None else float(data["e"]))
    except (KeyError, TypeError, ValueError):
        raise LinkRefused("tampered", "This link is not valid.", 400) from None
    if claim.action not in ACTIONS.get(claim.kind, ()):
        raise LinkRefused("tampered", "This link is not valid.", 400)
    return claim


def _request(claim: Claim, tenant_id: int) -> Approval | Question | None:
    model = Approval if claim.kind == "approval" else Question
    return (model.objects.select_related("decided_by" if model is Approval else "answered_by")
            .filter(pk=claim.request_id, tenant_id=tenant_id).first())


def _still_open(claim: Claim, request: Approval | Question) -> None:
    if isinstance(request, Approval):
        if request.status == Decision.PENDING:
            return
        who, at, via = request.decided_by, request.decided_at, request.channel
    else:
        if request.status == QuestionStatus.OPEN:
            return
        who, at, via = request.answered_by, request.answered_at, request.channel
    said = f"This request is already {request.status}"
    if who is not None:
        said += f" by {who.get_username()}"
    if via:
        said += f" (from {via})"
    if at is not None:
        said += f" at {at:%Y-%m-%d %H:%M} UTC"
    raise LinkRefused("closed", said + ". A link works once; nothing was changed.", 409)
