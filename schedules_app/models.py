"""Schedules: an agent or a workflow run on a cron schedule, and the record of
each due time.

A `ScheduleRun` is written once per (schedule, due time), whatever happened
then (a run started, skipped, or failed to start): the unique constraint, with
the started task's idempotency key (`schedule:<id>:<due time>`), makes a due
time fire exactly once across workers, sweeps and restarts. Times are stored
in UTC; the schedule's `timezone` only says how its cron reads.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from accounts_app.models import Tenant
from tasks_app.models import Task


class Overlap(models.TextChoices):
    """What a due time does while the schedule's previous run is still going."""

    SKIP = "skip"  # recorded as skipped_overlap
    QUEUE = "queue"  # waits: stays due until the previous run ends
    ALLOW = "allow"  # starts anyway


class CatchUp(models.TextChoices):
    """Which due times that passed unfired (no worker swept then) still run."""

    NONE = "none"  # none: only a due time reached on time runs
    ONE = "one"  # the latest of them
    ALL = "all"  # each of them, the latest CATCH_UP_MAX at most


class RunOutcome(models.TextChoices):
    STARTED = "started"
    SKIPPED_OVERLAP = "skipped_overlap"
    SKIPPED_CATCH_UP = "skipped_catch_up"
    FAILED = "failed"  # the target could not be started (deleted since, disabled, ...)


def default_input() -> dict[str, Any]:
    return {}


class Schedule(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="schedules")
    name = models.SlugField(max_length=64)
    # {"agent": name} or {"workflow": name}: a kind registered in `schedules_app.starters`
    target = models.JSONField()
    input = models.JSONField(default=default_input, blank=True)
    goal = models.TextField(blank=True, help_text="An agent run's goal.")
    script = models.JSONField(null=True, blank=True, help_text="A scripted agent's decisions.")
    cron = models.CharField(max_length=100)
    timezone = models.CharField(max_length=64, default="UTC")
    overlap = models.CharField(max_length=8, choices=Overlap.choices, default=Overlap.SKIP)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.NONE)
    paused = models.BooleanField(default=False)
    next_due_at = models.DateTimeField(db_index=True)
    last_due_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                   on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="schedule_unique_name")]

    def __str__(self) -> str:
        return self.name

    @property
    def target_kind(self) -> str:
        return next(iter(self.target)) if isinstance(self.target, dict) and self.target else ""

    @property
    def target_name(self) -> str:
        return str(self.target.get(self.target_kind, "")) if self.target_kind else ""


class ScheduleRun(models.Model):
    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    due_at = models.DateTimeField()
    task = models.ForeignKey(Task, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="+")
    outcome = models.CharField(max_length=16, choices=RunOutcome.choices)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-due_at"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "due_at"], name="schedule_run_once")]

    def __str__(self) -> str:
        return f"{self.schedule_id}@{self.due_at.isoformat()}: {self.outcome}"
