"""Tenants, memberships (a user's tenant and role) and hashed API keys.

The tables keep the names they had in tasks_app (no data moved with the models)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Role(models.TextChoices):
    REQUESTER = "requester"
    OPERATOR = "operator"
    REVIEWER = "reviewer"
    ADMIN = "admin"


class Tenant(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "tasks_app_tenant"

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    """A user belongs to exactly one tenant, with one role."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)

    class Meta:
        db_table = "tasks_app_membership"

    def __str__(self) -> str:
        return f"{self.user} @ {self.tenant} ({self.role})"


class ApiKey(models.Model):
    """An API key; only its SHA-256 is stored, the key itself is shown once.

    Its scope (`agents`, `tools`; an empty list: no limit of its own) narrows
    its user's (`approvals_app.models.RequesterScope`), never widens it: a task
    submitted with the key runs within both (`approvals_app.policy`)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys"
    )
    prefix = models.CharField(max_length=12, db_index=True)
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    agents = models.JSONField(default=list, blank=True, db_default=[])
    tools = models.JSONField(default=list, blank=True, db_default=[])

    class Meta:
        db_table = "tasks_app_apikey"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
