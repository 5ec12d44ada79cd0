"""A short record of recovery sweeps: who swept, from when to when (database
clock). Operators see that recovery runs without beat; the tests check from it
that two sweeps never overlap. Only the last `SweepRun.KEEP` rows are kept."""
from __future__ import annotations

from django.db import models


class SweepRun(models.Model):
    KEEP = 500

    owner = models.CharField(max_length=200)  # host:pid:thread of the sweeper
    started_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    requeued = models.PositiveIntegerField(default=0)
    admitted = models.PositiveIntegerField(default=0)
    approvals_expired = models.PositiveIntegerField(default=0)
    deadlines_failed = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"sweep {self.pk} by {self.owner}"
