"""The processes that run slices (Celery worker processes), as the recovery
sweep knows them: each holds a session-level advisory lock on `key` for its
lifetime (`store.liveness`). A row whose lock nobody holds is a dead process:
its leases need not wait out their TTL."""
from __future__ import annotations

from django.db import models


class RunnerProcess(models.Model):
    name = models.CharField(max_length=100, unique=True)  # host:pid:token, its leases' prefix
    key = models.BigIntegerField(unique=True)  # its advisory lock's key
    started_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.name
