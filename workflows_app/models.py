"""Workflows and their versions, and the link from a run (a task) to the
version it runs.

`WorkflowVersion` rows are immutable, numbered 1, 2, 3 per workflow, with who
made each, when, and the diff from the one before; `Workflow.current_version`
names the version new runs get (`release_candidate`/`release_percent` send a
share of them to another, as agents' releases do). A run keeps the version it
started with: its task's snapshot holds the definition itself.
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from accounts_app.models import Tenant
from tasks_app.models import Task


class Workflow(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="workflows")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    enabled = models.BooleanField(default=True)
    # An admin's choice: only published workflows are visible to the open
    # protocols (A2A, MCP); not part of a version.
    published = models.BooleanField(default=False, db_default=False)
    current_version = models.PositiveIntegerField(default=1)
    release_candidate = models.PositiveIntegerField(null=True, blank=True)
    release_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"],
                                               name="workflow_unique_name")]

    def __str__(self) -> str:
        return self.name


class WorkflowVersion(models.Model):
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    definition = models.JSONField(help_text="The definition as registered (parsed YAML or JSON).")
    source = models.TextField(blank=True, help_text="The YAML text, when it was given as text.")
    diff = models.JSONField(default=list, help_text="[{path, change, old, new}] from the previous.")
    actor = models.CharField(max_length=150)
    actor_role = models.CharField(max_length=16, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["workflow", "-number"]
        constraints = [models.UniqueConstraint(fields=["workflow", "number"],
                                               name="workflow_version_unique_number")]

    def __str__(self) -> str:
        return f"{self.workflow_id} v{self.number}"


class WorkflowRun(models.Model):
    """A task that runs a workflow: which one, and which version."""

    task = models.OneToOneField(Task, on_delete=models.CASCADE, primary_key=True,
                                related_name="workflow_run")
    workflow = models.ForeignKey(Workflow, on_delete=models.PROTECT, related_name="runs")
    version = models.PositiveIntegerField()

    class Meta:
        indexes = [models.Index(fields=["workflow", "-task"], name="workflow_run_recent")]

    def __str__(self) -> str:
        return f"run {self.task_id} of {self.workflow_id} v{self.version}"
