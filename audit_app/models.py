"""`AuditEntry`: one change to a tenant's configuration, append-only.

Written only by `audit_app.services.audit_record`, in the transaction of the
change it describes (so an entry exists exactly when its change committed).
Never updated or deleted by the product; a tenant's entries go with the tenant.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditKind(models.TextChoices):
    TOOL = "tool"
    AGENT = "agent"
    SECRET = "secret"
    WEBHOOK = "webhook"
    MEMBERSHIP = "membership"
    API_KEY = "api_key"
    MEMORY = "memory"


class AuditEntry(models.Model):
    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+",
                               db_index=False)
    created_at = models.DateTimeField(auto_now_add=True)
    # who: the name and role as recorded on task events, and the user when there is one
    actor = models.CharField(max_length=150)
    actor_role = models.CharField(max_length=16, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="+")
    kind = models.CharField(max_length=32,
                            help_text="tool, agent, secret, webhook, membership, ...")
    name = models.CharField(max_length=200, help_text="The object's name (or id) in its kind.")
    object_id = models.CharField(max_length=64, blank=True)
    action = models.CharField(max_length=32, help_text="created, updated, deleted, released, ...")
    diff = models.JSONField(default=list, help_text="[{path, change, old, new}]")
    request_id = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="audit_tenant_recent"),
            models.Index(fields=["tenant", "kind", "name", "-id"], name="audit_tenant_object"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} {self.action} by {self.actor}"
