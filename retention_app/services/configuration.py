"""A tenant's configuration as a tenant export writes it: agents and their
versions and releases, tools and MCP servers, workflows and their versions,
approval rules, reviewer groups and requester scopes, schedules, webhooks and
notification settings, quotas, retention, members, and tenant secrets by name.

Never a secret's value: every column the vault keeps sealed
(`accounts_app.vault.stores.sealed_columns`: tenant secrets' ciphertext, webhook
signing secrets) is left out, and so are API keys (hashes of credentials).
Users are named by username (natural keys), not by id.
"""
from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Model, QuerySet

from accounts_app.models import Membership, TenantQuota, TenantSecret
from accounts_app.vault.stores import sealed_columns
from approvals_app.models import ApprovalRule, RequesterScope, ReviewerGroup
from notify_app.models import NotificationSettings, WebhookSubscription
from schedules_app.models import Schedule
from tasks_app.models import AgentProfile, AgentReleaseEntry, AgentVersion
from tools_app.models import McpServer, Tool
from workflows_app.models import Workflow, WorkflowVersion

from ..models import RetentionPolicy

# (model, the lookup from it to its tenant's id)
CONFIGURATION: list[tuple[type[Model], str]] = [
    (AgentProfile, "tenant_id"), (AgentVersion, "agent__tenant_id"),
    (AgentReleaseEntry, "agent__tenant_id"),
    (Tool, "tenant_id"), (McpServer, "tenant_id"),
    (Workflow, "tenant_id"), (WorkflowVersion, "workflow__tenant_id"),
    (ReviewerGroup, "tenant_id"), (ApprovalRule, "tenant_id"), (RequesterScope, "tenant_id"),
    (Schedule, "tenant_id"), (WebhookSubscription, "tenant_id"),
    (NotificationSettings, "tenant_id"), (TenantQuota, "tenant_id"),
    (RetentionPolicy, "tenant_id"), (Membership, "tenant_id"), (TenantSecret, "tenant_id"),
]


def configuration_of(tenant_id: int) -> Iterator[tuple[QuerySet, list[str]]]:
    """Each configuration model's rows of the tenant, with the fields to write."""
    sealed = {(column.model, column.field) for column in sealed_columns()}
    for model, lookup in CONFIGURATION:
        fields = [f.name for f in model._meta.local_fields + model._meta.local_many_to_many
                  if not f.primary_key and (model, f.name) not in sealed]
        yield model._default_manager.filter(**{lookup: tenant_id}).order_by("pk"), fields
