"""Reads of secrets' names, API keys and members, always scoped to a tenant by the caller."""
from __future__ import annotations

from django.db.models import QuerySet

from .models import ApiKey, Membership, TenantSecret


def secrets_of_tenant(tenant_id: int) -> QuerySet[TenantSecret]:
    """The tenant's secrets, without their ciphertext (nothing here reads a value)."""
    return TenantSecret.objects.filter(tenant_id=tenant_id).defer("ciphertext")


def missing_secret_names(tenant_id: int, names: set[str]) -> list[str]:
    """Which of `names` are not secrets of the tenant, sorted."""
    if not names:
        return []
    found = set(secrets_of_tenant(tenant_id).filter(name__in=names).values_list("name", flat=True))
    return sorted(names - found)


def api_keys_visible(*, tenant_id: int, user_id: int, admin: bool) -> QuerySet[ApiKey]:
    """The API keys a member may see and scope: their own; an admin, the tenant's."""
    keys = ApiKey.objects.filter(user__membership__tenant_id=tenant_id).select_related("user")
    return (keys if admin else keys.filter(user_id=user_id)).order_by("id")


def members_of_tenant(tenant_id: int) -> QuerySet[Membership]:
    """The tenant's members with their users, by user name."""
    return (Membership.objects.filter(tenant_id=tenant_id).select_related("user")
            .order_by("user__username"))
