"""Agent profile versions and the release log.

`AgentVersion` rows are immutable: each is the full configuration a task runs
with (`AgentProfile.snapshot()`) as it was after one change, numbered 1, 2, 3
per profile, with who made it, when, and the diff from the version before.
`AgentProfile.current_version` names the version new tasks get;
`release_candidate`/`release_percent` send a share of them to another one.
`AgentReleaseEntry` is the append-only record of every release change
(started, changed, ended, promoted, rolled back): who, when, what.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from .agents import AgentProfile


class Stamped(models.Model):
    """Who did it (name and role as recorded on events, and the user) and when."""

    actor = models.CharField(max_length=150)
    actor_role = models.CharField(max_length=16, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True


class VersionKind(models.TextChoices):
    CREATED = "created"
    EDITED = "edited"
    ROLLED_BACK = "rolled_back"
    IMPORTED = "imported"  # recorded for a profile that had none (migration, first use)


class AgentVersion(Stamped):
    agent = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    config = models.JSONField(help_text="AgentProfile.snapshot() as it was: what a task runs with.")
    diff = models.JSONField(default=list, help_text="[{path, change, old, new}] from the previous.")
    kind = models.CharField(max_length=16, choices=VersionKind.choices)
    source_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="A rollback: the version whose configuration this copies."
    )

    class Meta:
        ordering = ["agent", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["agent", "number"], name="agent_version_unique_number")
        ]

    def __str__(self) -> str:
        return f"{self.agent_id} v{self.number}"


class ReleaseAction(models.TextChoices):
    STARTED = "started"
    CHANGED = "changed"
    ENDED = "ended"
    PROMOTED = "promoted"
    ROLLED_BACK = "rolled_back"


class AgentReleaseEntry(Stamped):
    agent = models.ForeignKey(AgentProfile, on_delete=models.CASCADE, related_name="release_log")
    action = models.CharField(max_length=16, choices=ReleaseAction.choices)
    current_before = models.PositiveIntegerField()
    current_after = models.PositiveIntegerField()
    candidate = models.PositiveIntegerField(null=True, blank=True)
    percent = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["agent", "-id"], name="agent_release_recent")]

    def __str__(self) -> str:
        return f"{self.action} ({self.agent_id})"
