"""The append-only event log. Transition events carry `from`/`to` in their
payload; replaying them rebuilds a task's status and version."""
from __future__ import annotations

from django.db import models

from accounts_app.models import Tenant

from .tasks import Task


class Event(models.Model):
    # indexed by (task, id), below
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="events",
                             db_index=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    task_version = models.PositiveIntegerField()
    type = models.CharField(max_length=40)
    payload = models.JSONField(default=dict)
    actor = models.CharField(max_length=150)
    actor_role = models.CharField(max_length=16, blank=True)
    trace_id = models.CharField(max_length=32)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["task", "id"], name="event_task_id")]

    def __str__(self) -> str:
        return f"{self.type} v{self.task_version} (task {self.task_id})"
