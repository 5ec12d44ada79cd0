"""Context summaries: versioned digests of older steps, citing the events they cover."""
from __future__ import annotations

from django.db import models

from .tasks import Task


class ContextSummary(models.Model):
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="summaries")
    version = models.PositiveIntegerField()
    text = models.TextField()
    covers_until_step = models.PositiveIntegerField()
    event_ids = models.JSONField(default=list)
    active = models.BooleanField(default=True)
    created_by = models.CharField(max_length=150, default="system")
    # The must-survive facts of the steps it covers (`context.facts`), those no
    # summary text kept, pinned verbatim in the context, and the check's record.
    facts = models.JSONField(default=list)
    pinned_facts = models.JSONField(default=list)
    fact_check = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["version"]
        constraints = [
            models.UniqueConstraint(fields=["task", "version"], name="summary_unique_version")
        ]

    def __str__(self) -> str:
        return f"summary v{self.version} of task {self.task_id}"
