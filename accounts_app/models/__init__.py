"""Tenants, memberships, roles, API keys, tenant secrets and tenant quotas.

Their tables keep the names they had when tasks_app held them
(`tasks_app_tenant`, ...): the models moved, the data did not."""

from .quotas import OverSpend, TenantQuota
from .secrets import TenantSecret
from .tenancy import ApiKey, Membership, Role, Tenant

__all__ = [
    "ApiKey",
    "Membership",
    "OverSpend",
    "Role",
    "Tenant",
    "TenantQuota",
    "TenantSecret",
]
