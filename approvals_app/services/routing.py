"""Reassigning a pending request: to a person (a reviewer or admin of the
tenant) or to a reviewer group. Whoever may decide on it may hand it on; a
request only a group decides (`require_role`) goes only to one of its members
or stays with that group; an authorization goes only to an admin. The move is
an attributed event of the task (`approval_reassigned`); the task's version
does not change, so a reviewer's open view stays valid."""
from __future__ import annotations

from django.db import transaction

from accounts_app.models import Membership, Role
from foundations.actors import Actor
from foundations.errors import forbidden, invalid
from tasks_app.store.events import event_note

from ..gates import AUTHORIZATION
from ..models import Approval, ReviewerGroup
from ..selectors import in_group, may_decide, pending_approval_locked


def approval_reassign(*, approval_id: int, tenant_id: int, actor: Actor,
                      to_user: str | None = None, to_group: str | None = None,
                      comment: str = "") -> Approval:
    if bool(to_user) == bool(to_group):
        raise invalid("invalid", "The request is not valid.",
                      to=["name a person (to_user) or a group (to_group), one of them"])
    if actor.role not in (Role.REVIEWER, Role.ADMIN):
        raise forbidden("role_required", "only reviewers and admins reassign requests")
    with transaction.atomic():
        approval = pending_approval_locked(approval_id=approval_id, tenant_id=tenant_id)
        if not may_decide(approval, actor) and actor.role != Role.ADMIN:
            raise forbidden("not_your_request", "only who may decide on a request hands it on")
        payload: dict[str, object] = {"approval_id": approval.pk, "comment": comment,
                                      "from_user_id": approval.assignee_id,
                                      "from_group_id": approval.group_id}
        if to_user:
            member = (Membership.objects.filter(tenant_id=tenant_id, user__username=to_user)
                      .values_list("user_id", "role").first())
            allowed = (Role.ADMIN,) if approval.kind == AUTHORIZATION else (
                Role.REVIEWER, Role.ADMIN)
            if member is None or member[1] not in allowed:
                raise invalid("invalid", "The request is not valid.", to_user=[
                    f"{to_user!r} is not a {' or '.join(allowed)} of this tenant"])
            if approval.group_required and approval.kind != AUTHORIZATION and not (
                    approval.group_id is not None and in_group(approval.group_id, member[0])):
                raise invalid("invalid", "The request is not valid.", to_user=[
                    "only a member of the request's group may decide on it"])
            approval.assignee_id = member[0]
            payload["to_user"] = to_user
        else:
            group = ReviewerGroup.objects.filter(tenant_id=tenant_id, name=to_group).first()
            if group is None:
                raise invalid("invalid", "The request is not valid.",
                              to_group=[f"no reviewer group named {to_group!r}"])
            if approval.group_required and approval.kind != AUTHORIZATION \
                    and actor.role != Role.ADMIN:
                raise forbidden("group_required",
                                "only an admin moves a request its rule gave to one group")
            approval.group_id, approval.assignee_id = group.pk, None
            payload["to_group"] = group.name
        approval.save(update_fields=["assignee", "group"])
        event_note(task_id=approval.task_id, type="approval_reassigned", actor=actor,
                   payload=payload)
    return approval
