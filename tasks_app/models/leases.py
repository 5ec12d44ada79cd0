"""Resource leases: at most one tool call per (tenant, resource) at a time.

One `ResourceLease` row per resource ever leased; it is never deleted, so its
`fencing_token` only grows (each acquisition takes the next one). A free
resource has no holder (`holder_key` empty). `LeaseWaiter` rows say which
tasks wait for a resource: they are woken when it is released. The rules are
`tasks_app.leases`'.
"""
from __future__ import annotations

from django.db import models


class ResourceLease(models.Model):
    tenant_id = models.BigIntegerField()
    resource = models.CharField(max_length=200)
    fencing_token = models.PositiveBigIntegerField(default=0)
    # the holder: the call (its ledger key), its task and step, the executor running it
    holder_key = models.CharField(max_length=64, blank=True)
    holder_task_id = models.BigIntegerField(null=True, blank=True)
    holder_step_id = models.BigIntegerField(null=True, blank=True)
    holder_step_no = models.PositiveIntegerField(null=True, blank=True)
    holder_owner = models.CharField(max_length=128, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant_id", "resource"],
                                               name="lease_unique_resource")]

    def __str__(self) -> str:
        return f"lease {self.resource} #{self.fencing_token}"


class LeaseWaiter(models.Model):
    tenant_id = models.BigIntegerField()
    resource = models.CharField(max_length=200)
    task_id = models.BigIntegerField()
    step_no = models.PositiveIntegerField()
    since = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant_id", "resource", "task_id"],
                                               name="lease_waiter_unique")]
        indexes = [models.Index(fields=["task_id"], name="lease_waiter_task")]

    def __str__(self) -> str:
        return f"task {self.task_id} waits for {self.resource}"
