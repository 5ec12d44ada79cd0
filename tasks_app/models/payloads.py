"""Payloads stored out of row: a tool output, a model log, a decision, a result
or a task input larger than `PAYLOAD_INLINE_MAX_BYTES` (docs/explanation/write-path.md).

A blob is stored once per tenant and content (its SHA-256), never shared
across tenants; the row that would have held the value holds a reference
(`tasks_app.payloads.reference`), and a `PayloadUse` per reference ties the
blob to its task: the per-task limit adds the uses up, the resolver reads a
blob only through a use of the task asking, and a blob no use points at any
more is deleted with the last task that used it (`payloads.drop_unused`).
"""
from __future__ import annotations

from django.db import models

from accounts_app.models import Tenant

from .tasks import Task


class PayloadBlob(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+",
                               db_index=False)
    sha256 = models.CharField(max_length=64, help_text="of the value's canonical JSON")
    size = models.BigIntegerField(help_text="bytes of the value's JSON")
    data = models.BinaryField(help_text="the value's JSON, zlib-compressed")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "sha256"],
                                               name="payload_blob_once_per_tenant")]

    def __str__(self) -> str:
        return f"{self.tenant_id} {self.sha256} ({self.size} bytes)"


class PayloadUse(models.Model):
    """One reference to a blob from one of a task's rows ."""

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="+")
    blob = models.ForeignKey(PayloadBlob, on_delete=models.CASCADE, related_name="uses")
    size = models.BigIntegerField()

    def __str__(self) -> str:
        return f"task {self.task_id} uses blob {self.blob_id}"
