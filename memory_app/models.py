"""Memory items, their versions, and the writes a model proposed.

An item belongs to one scope of its tenant: the tenant itself, one agent
profile, or one subject (who a task is about, `Task.subject`). `scope_key`
names that scope in one column ("tenant", "agent:<id>", "subject:<subject>"):
retrieval reads the task's scopes by it, through one index.

Full-text search is not a Django field: on PostgreSQL a generated `tsvector`
column (`search`, GIN-indexed), on SQLite an FTS5 table kept in step by
triggers (`memory_app_memoryitem_fts`); both made by migration 0001 for the
database in use, and read by `selectors` in SQL.
"""
from __future__ import annotations

from django.db import models

from accounts_app.models import Tenant
from tasks_app.models import AgentProfile, Task


class Scope(models.TextChoices):
    TENANT = "tenant"
    AGENT = "agent"
    SUBJECT = "subject"


class Kind(models.TextChoices):
    FACT = "fact"
    PREFERENCE = "preference"
    ARTIFACT = "artifact"


class ProposalStatus(models.TextChoices):
    OPEN = "open"
    ACCEPTED = "accepted"
    REJECTED = "rejected"


def scope_key(scope: str, *, agent_id: int | None = None, subject: str = "") -> str:
    if scope == Scope.AGENT:
        return f"agent:{agent_id}"
    if scope == Scope.SUBJECT:
        return f"subject:{subject}"
    return "tenant"


class Source(models.Model):
    """Where a version came from: a task's step and its event, or a person."""

    source_task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+", db_index=False)
    source_step_no = models.PositiveIntegerField(null=True, blank=True)
    source_event_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        abstract = True


class MemoryItem(Source):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+",
                               db_index=False)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    agent = models.ForeignKey(AgentProfile, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="+", db_index=False)
    subject = models.CharField(max_length=200, blank=True, default="")
    scope_key = models.CharField(max_length=210)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    text = models.TextField()
    value = models.JSONField(null=True, blank=True)
    uri = models.CharField(max_length=2000, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    version = models.PositiveIntegerField(default=1)
    expires_at = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=150)
    updated_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # retrieval (a task's scopes, newest first), the per-scope count, the
            # subject filter and its erasure
            models.Index(fields=["tenant", "scope_key", "-updated_at"], name="memory_scope_recent"),
            # the API's and the console's lists, newest first
            models.Index(fields=["tenant", "-id"], name="memory_tenant_recent"),
            # the sweep's expired items (few rows have an expiry)
            models.Index(fields=["expires_at"], name="memory_expiry",
                         condition=models.Q(expires_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return self.cite_id

    @property
    def cite_id(self) -> str:
        return f"mem:{self.pk}@{self.version}"


class MemoryVersion(Source):
    """One version of an item as it was written; an update adds the next one."""

    item = models.ForeignKey(MemoryItem, on_delete=models.CASCADE, related_name="versions",
                             db_index=False)
    version = models.PositiveIntegerField()
    kind = models.CharField(max_length=16, choices=Kind.choices)
    text = models.TextField()
    value = models.JSONField(null=True, blank=True)
    uri = models.CharField(max_length=2000, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    author = models.CharField(max_length=150)
    author_role = models.CharField(max_length=16, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["item", "version"],
                                               name="memory_version_unique")]

    def __str__(self) -> str:
        return f"mem:{self.item_id}@{self.version}"


class MemoryProposal(models.Model):
    """A write a model proposed under the `propose` policy: a reviewer accepts
    it (as it is, or edited), which writes the item, or rejects it, which
    writes nothing. The task does not wait for it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+",
                               db_index=False)
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+", db_index=False)
    step_no = models.PositiveIntegerField()
    event_id = models.BigIntegerField(null=True, blank=True)
    scope = models.CharField(max_length=16, choices=Scope.choices)
    agent = models.ForeignKey(AgentProfile, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="+", db_index=False)
    subject = models.CharField(max_length=200, blank=True, default="")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    text = models.TextField()
    value = models.JSONField(null=True, blank=True)
    uri = models.CharField(max_length=2000, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=ProposalStatus.choices,
                              default=ProposalStatus.OPEN)
    item = models.ForeignKey(MemoryItem, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+", db_index=False)
    decided_by = models.CharField(max_length=150, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.CharField(max_length=1000, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [
            models.Index(fields=["tenant", "status", "id"], name="memory_proposal_open"),
            # erasure by subject
            models.Index(fields=["tenant", "subject"], name="memory_proposal_subject",
                         condition=~models.Q(subject="")),
        ]

    def __str__(self) -> str:
        return f"memory proposal {self.pk} ({self.status})"
