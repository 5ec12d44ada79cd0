"""How long a tenant's finished tasks stay online, and where those past it went.

- `RetentionPolicy`: a tenant's own period, shorter than the operator's
  maximum (`TETHER_RETENTION_MAX_DAYS`); a tenant without one keeps the
  operator's default (`TETHER_RETENTION_DAYS`).
- `ArchiveFile`: one compressed JSON Lines file in the archive storage, with
  what it holds and its checksum: the archive's index.
- `ArchivedTask`: one row per archived task id, pointing at its file, so an
  archived task is still found by id (the API answers 410 Gone with it).
- `Export`: one export of a tenant or a subject, a background job with its
  progress, then a zip file in the exports storage until it expires.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from accounts_app.models import Tenant


class RetentionPolicy(models.Model):
    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, primary_key=True,
                                  related_name="retention_policy")
    days = models.PositiveIntegerField()
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")

    def __str__(self) -> str:
        return f"{self.tenant_id}: {self.days} days"


class ArchiveFile(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="archive_files")
    # The month its tasks finished in (YYYY-MM): files are grouped under it.
    period = models.CharField(max_length=7)
    name = models.CharField(max_length=300, unique=True)  # in the archive storage
    tasks = models.PositiveIntegerField()
    rows = models.PositiveIntegerField()
    size_bytes = models.PositiveBigIntegerField()
    sha256 = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "period"], name="archive_file_period")]

    def __str__(self) -> str:
        return self.name


class ArchivedTask(models.Model):
    task_id = models.BigIntegerField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    archive = models.ForeignKey(ArchiveFile, on_delete=models.PROTECT, related_name="entries")
    finished_at = models.DateTimeField()
    archived_at = models.DateTimeField(auto_now_add=True)
    # Set when an operator brought it back online; it is then never archived again
    # by the sweep (its file keeps the copy).
    restored_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"task {self.task_id} in {self.archive_id}"


class ExportScope(models.TextChoices):
    TENANT = "tenant"
    SUBJECT = "subject"


class ExportStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    EXPIRED = "expired"  # its file was deleted (past its expiry, or by an erasure)


class Export(models.Model):
    """One export of a tenant or of a subject: a background job, then one zip
    file of JSON Lines in the `exports` storage until `expires_at`."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    scope = models.CharField(max_length=8, choices=ExportScope.choices)
    # Blanked once the export is done or failed: the row outlives the job and
    # must not keep the subject's name (`subject_ref` names it by a digest).
    subject = models.CharField(max_length=200, blank=True, default="")
    subject_ref = models.CharField(max_length=40, blank=True, default="")
    status = models.CharField(max_length=8, choices=ExportStatus.choices,
                              default=ExportStatus.QUEUED)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                     on_delete=models.SET_NULL, related_name="+")
    actor = models.CharField(max_length=150)
    actor_role = models.CharField(max_length=16, blank=True)
    # progress: tasks written of the tasks in scope (online and archived)
    tasks_total = models.PositiveIntegerField(default=0)
    tasks_done = models.PositiveIntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True)
    name = models.CharField(max_length=300, blank=True)  # in the exports storage
    size_bytes = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # Its last sign of life: queued or handed over to a worker, then each progress
    # update. The sweep hands over again what stays queued, and queues again what
    # stops beating while running (a worker killed).
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "-id"], name="export_tenant_recent"),
                   models.Index(fields=["status", "expires_at"], name="export_status_expiry")]

    def __str__(self) -> str:
        return f"export {self.pk} ({self.scope}, {self.status})"
