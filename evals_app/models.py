"""Evaluations: recorded tasks replayed as shadow tasks with a candidate version.

An `Evaluation` names the agent, the candidate (and optionally the baseline)
version, how the recorded tasks were chosen and how a candidate's result is
scored. Each recorded task it replays is one `EvaluationTask`, made with its
shadow task in the transaction that starts the evaluation, so a replay exists
exactly once whatever happens to the workers afterwards.
"""
from __future__ import annotations

from django.db import models


class Scorer(models.TextChoices):
    EXACT = "exact"  # the results are equal as canonical JSON
    SUBSET = "subset"  # every field of the baseline's result is in the candidate's, equal
    SCHEMA = "schema"  # the candidate's result matches the agent's result schema
    JUDGE = "judge"  # an agent profile of the tenant scores both results from 0 to 1


class EvaluationStatus(models.TextChoices):
    RUNNING = "running"
    FINISHED = "finished"
    CANCELED = "canceled"


class Evaluation(models.Model):
    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE,
                               related_name="+")
    agent = models.ForeignKey("tasks_app.AgentProfile", on_delete=models.CASCADE,
                              related_name="evaluations")
    candidate_version = models.PositiveIntegerField()
    baseline_version = models.PositiveIntegerField(null=True, blank=True)
    # how the recorded tasks were chosen: {"filter": {...}} or {"ids": [...]}
    selection = models.JSONField(default=dict)
    limit = models.PositiveIntegerField()
    scorer = models.CharField(max_length=8, choices=Scorer.choices)
    judge = models.CharField(max_length=64, blank=True)  # the judge's agent profile
    pass_threshold = models.FloatField(default=1.0)  # a task passes at this score or above
    live_reads = models.BooleanField(default=False)
    status = models.CharField(max_length=10, choices=EvaluationStatus.choices,
                              default=EvaluationStatus.RUNNING)
    summary = models.JSONField(default=dict, blank=True)
    created_by = models.CharField(max_length=150)
    created_by_role = models.CharField(max_length=16, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["tenant", "-id"], name="evaluation_tenant_recent"),
            # the release gate: the agent's finished evaluations of a version
            models.Index(fields=["agent", "candidate_version", "status"],
                         name="evaluation_agent_candidate"),
        ]

    def __str__(self) -> str:
        return f"evaluation {self.pk} of {self.agent_id} v{self.candidate_version}"


class EvaluationTask(models.Model):
    evaluation = models.ForeignKey(Evaluation, on_delete=models.CASCADE, related_name="tasks")
    # no foreign keys to tasks: a recorded task may be purged, the evaluation is kept
    recorded_task_id = models.BigIntegerField()
    shadow_task_id = models.BigIntegerField(unique=True)
    judge_task_id = models.BigIntegerField(null=True, blank=True, unique=True)
    done = models.BooleanField(default=False)
    score = models.FloatField(null=True, blank=True)
    passed = models.BooleanField(null=True, blank=True)
    reason = models.TextField(blank=True)  # why the score (a judge's reason, a scorer's)
    comparison = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["evaluation", "recorded_task_id"],
                                    name="evaluation_task_once"),
        ]

    def __str__(self) -> str:
        return f"replay of task {self.recorded_task_id} as {self.shadow_task_id}"
