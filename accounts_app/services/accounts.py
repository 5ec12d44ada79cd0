"""Tenants, users, memberships and API keys.

A tenant's admin is not Django staff: the Django admin is for the operator's
superusers only (`config.admin_site`). A member who loses access (membership
revoked, user deactivated) has their live sockets closed once that commits
(`hooks.access_lost`).
Every change of a membership, and every new API key, is an audit entry of the
member's tenant (`audit_app`)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from approvals_app.models import RequesterScope
from audit_app.services import audit_record
from foundations.actors import SYSTEM, Actor
from foundations.errors import forbidden, invalid, not_found

from ..hooks import access_lost
from ..models import ApiKey, Membership, Role, Tenant

KEY_PREFIX = "tth_"
# A key's `last_used_at` is written at most once per grain: writing it on every
# request was a second statement and a commit per API call.
LAST_USED_GRAIN = timedelta(minutes=1)


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def api_key_in_use(raw: str) -> ApiKey | None:
    """The live key `raw` is (with its user and the user's membership, in one
    read), its use noted; None for an unknown or revoked key or an inactive user.
    Every door that takes API keys (the REST API, A2A, MCP) asks this."""
    key = (
        ApiKey.objects.select_related("user", "user__membership")
        .filter(key_hash=hash_key(raw), revoked=False)
        .first()
    )
    if key is None or not key.user.is_active:
        return None
    now = timezone.now()
    if key.last_used_at is None or now - key.last_used_at >= LAST_USED_GRAIN:
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    return key


def tenant_create(*, name: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(name=name)
    return tenant


def user_ensure(*, tenant: Tenant, username: str, role: str, password: str | None = None,  # type: ignore[no-untyped-def]
                actor: Actor = SYSTEM, email: str | None = None):
    """Create the user (or update its role, and its e-mail address when given); a
    user belongs to one tenant only."""
    if role not in Role.values:
        raise invalid(
            "invalid", "The request is not valid.", role=[f"one of {', '.join(Role.values)}"]
        )
    if email is not None:
        email = _checked_email(email)
    User = get_user_model()
    with transaction.atomic():
        user, _ = User.objects.get_or_create(username=username)
        membership = Membership.objects.filter(user=user).first()
        if membership is not None and membership.tenant_id != tenant.pk:
            raise invalid(
                "invalid",
                "The request is not valid.",
                username=[f"{username} already belongs to tenant {membership.tenant.name}"],
            )
        before = None if membership is None else {"role": membership.role}
        Membership.objects.update_or_create(user=user, defaults={"tenant": tenant, "role": role})
        audit_record(actor=actor, tenant_id=tenant.pk, kind="membership", name=username,
                     action="created" if before is None else "updated", before=before,
                     after={"role": role}, object_id=user.pk)
        if password:
            user.set_password(password)
        if email is not None and email != user.email:
            audit_record(actor=actor, tenant_id=tenant.pk, kind="membership", name=username,
                         action="updated", before={"email": user.email}, after={"email": email},
                         object_id=user.pk)
            user.email = email
        user.save()
    return user


def member_email_set(*, tenant_id: int, user_id: int, email: str, actor: Actor) -> Membership:
    """Set a member's e-mail address: where notification e-mails go, and how a
    Slack user is recognised as this reviewer. Empty clears it."""
    email = _checked_email(email)
    with transaction.atomic():
        membership = (Membership.objects.select_related("user").select_for_update(of=("self",))
                      .filter(tenant_id=tenant_id, user_id=user_id).first())
        if membership is None:
            raise not_found("Member")
        user = membership.user
        if email and get_user_model().objects.filter(
                email__iexact=email, membership__tenant_id=tenant_id).exclude(pk=user.pk).exists():
            # one address, one reviewer: it is how a Slack user is mapped to a person
            raise invalid("invalid", "The request is not valid.",
                          email=["another member of this tenant has this address"])
        if email != user.email:
            audit_record(actor=actor, tenant_id=tenant_id, kind="membership",
                         name=user.get_username(), action="updated",
                         before={"email": user.email}, after={"email": email},
                         object_id=user.pk)
            user.email = email
            user.save(update_fields=["email"])
    return membership


def _checked_email(email: str) -> str:
    email = email.strip()
    if not email:
        return ""
    try:
        validate_email(email)
    except ValidationError:
        raise invalid("invalid", "The request is not valid.",
                      email=["a valid e-mail address"]) from None
    return email


def api_key_create(*, user, actor: Actor = SYSTEM) -> str:  # type: ignore[no-untyped-def]
    """A new API key for `user`; only its hash is stored, the key is returned once."""
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        key = ApiKey.objects.create(user=user, prefix=raw[:12], key_hash=hash_key(raw))
        membership = Membership.objects.filter(user=user).first()
        if membership is not None:  # the audit log is per tenant
            audit_record(actor=actor, tenant_id=membership.tenant_id, kind="api_key",
                         name=user.get_username(), action="created",
                         after={"prefix": key.prefix}, object_id=key.pk)
    return raw


def api_key_scope_set(*, tenant_id: int, key_id: int, agents: list[str], tools: list[str],
                      actor: Actor, via_key_id: int | None = None) -> ApiKey:
    """Give a key its scope (the agents it may run, the tools its tasks may call;
    an empty list: its user's). Only the key's owner or an admin of its tenant;
    a key narrows its user's scope and never widens it; a request made with a
    key that has a scope of its own may not change one (it could lift its own)."""
    if via_key_id is not None and ApiKey.objects.filter(pk=via_key_id).exclude(
            agents=[], tools=[]).exists():
        raise forbidden("scoped_key", "a key with a scope may not change the scope of keys")
    with transaction.atomic():
        key = (ApiKey.objects.select_for_update(of=("self",)).select_related("user")
               .filter(pk=key_id, user__membership__tenant_id=tenant_id).first())
        if key is None or (actor.role != Role.ADMIN and key.user_id != actor.user_id):
            raise not_found("API key")
        agents, tools = sorted(set(agents)), sorted(set(tools))
        user_scope = RequesterScope.objects.filter(user_id=key.user_id,
                                                   tenant_id=tenant_id).first()
        problems = {name: [f"outside its user's scope: {', '.join(wider)}"]
                    for name, asked, allowed in (
                        ("agents", agents, user_scope.agents if user_scope else []),
                        ("tools", tools, user_scope.tools if user_scope else []))
                    if allowed and (wider := sorted(set(asked) - set(allowed)))}
        if problems:
            raise invalid("invalid", "A key may only narrow its user's scope.", **problems)
        before = {"agents": key.agents, "tools": key.tools}
        after = {"agents": agents, "tools": tools}
        if before != after:
            key.agents, key.tools = agents, tools
            key.save(update_fields=["agents", "tools"])
            audit_record(actor=actor, tenant_id=tenant_id, kind="api_key",
                         name=f"{key.prefix} ({key.user.get_username()})", action="updated",
                         before=before, after=after, object_id=key.pk)
    return key


def membership_revoke(*, user_id: int, actor: Actor = SYSTEM) -> bool:
    """Take the user out of their tenant; False when they had no membership."""
    with transaction.atomic():
        membership = Membership.objects.select_related("user").filter(user_id=user_id).first()
        if membership is not None:
            audit_record(actor=actor, tenant_id=membership.tenant_id, kind="membership",
                         name=membership.user.get_username(), action="revoked",
                         before={"role": membership.role}, object_id=user_id)
        deleted, _ = Membership.objects.filter(user_id=user_id).delete()
        transaction.on_commit(lambda: access_lost(user_id))
    return bool(deleted)


def user_deactivate(*, user_id: int, actor: Actor = SYSTEM) -> bool:
    """The user can no longer sign in, use an API key or keep a live socket."""
    with transaction.atomic():
        changed = get_user_model().objects.filter(pk=user_id).update(is_active=False)
        membership = Membership.objects.select_related("user").filter(user_id=user_id).first()
        if changed and membership is not None:
            audit_record(actor=actor, tenant_id=membership.tenant_id, kind="membership",
                         name=membership.user.get_username(), action="deactivated",
                         before={"active": True}, after={"active": False}, object_id=user_id)
        transaction.on_commit(lambda: access_lost(user_id))
    return bool(changed)


def membership_audit(membership: Membership, *, actor: Actor,
                     before: Membership | None) -> None:
    """The audit entry of a membership saved outside `user_ensure` (the Django admin),
    in the caller's transaction, in the member's (new) tenant."""
    def shown(m: Membership) -> dict[str, str]:
        return {"role": m.role, "tenant": m.tenant.name}

    audit_record(actor=actor, tenant_id=membership.tenant_id, kind="membership",
                 name=membership.user.get_username(),
                 action="created" if before is None else "updated",
                 before=None if before is None else shown(before), after=shown(membership),
                 object_id=membership.user_id)
