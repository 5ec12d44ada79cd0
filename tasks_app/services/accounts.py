"""Tenants, users, memberships and API keys.

A tenant's admin is not Django staff: the Django admin is for the operator's
superusers only (`config.admin_site`). A member who loses access (membership
revoked, user deactivated) has their live sockets closed once that commits."""

from __future__ import annotations

import hashlib
import secrets

from django.contrib.auth import get_user_model
from django.db import transaction

from config.errors import invalid

from ..live.publish import end_user_sockets
from ..models import ApiKey, Membership, Role, Tenant

KEY_PREFIX = "tth_"


def hash_key(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def tenant_create(*, name: str) -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(name=name)
    return tenant


def user_ensure(*, tenant: Tenant, username: str, role: str, password: str | None = None):  # type: ignore[no-untyped-def]
    """Create the user (or update its role); a user belongs to one tenant only."""
    if role not in Role.values:
        raise invalid(
            "invalid", "The request is not valid.", role=[f"one of {', '.join(Role.values)}"]
        )
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
        Membership.objects.update_or_create(user=user, defaults={"tenant": tenant, "role": role})
        if password:
            user.set_password(password)
        user.save()
    return user


def api_key_create(*, user) -> str:  # type: ignore[no-untyped-def]
    """A new API key for `user`; only its hash is stored, the key is returned once."""
    raw = KEY_PREFIX + secrets.token_urlsafe(32)
    ApiKey.objects.create(user=user, prefix=raw[:12], key_hash=hash_key(raw))
    return raw


def membership_revoke(*, user_id: int) -> bool:
    """Take the user out of their tenant; False when they had no membership."""
    with transaction.atomic():
        deleted, _ = Membership.objects.filter(user_id=user_id).delete()
        transaction.on_commit(lambda: end_user_sockets(user_id))
    return bool(deleted)


def user_deactivate(*, user_id: int) -> bool:
    """The user can no longer sign in, use an API key or keep a live socket."""
    with transaction.atomic():
        changed = get_user_model().objects.filter(pk=user_id).update(is_active=False)
        transaction.on_commit(lambda: end_user_sockets(user_id))
    return bool(changed)
