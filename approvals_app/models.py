"""Approvals, questions and reconciliations: what a person saw, what they decided, who, when.

At most one open record per step (partial unique constraints), so a step can
never wait on two decisions.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Decision(models.TextChoices):
    """An approval's status: pending, then how it was decided."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    RESPONDED = "responded"
    EXPIRED = "expired"
    CANCELED = "canceled"


class DecisionChannel(models.TextChoices):
    """Where a person took a decision: every decision event and record says which."""

    CONSOLE = "console"
    API = "api"
    EMAIL = "email"
    SLACK = "slack"


def channel_field() -> models.CharField:  # type: ignore[type-arg]
    return models.CharField(max_length=8, choices=DecisionChannel.choices, blank=True,
                            help_text="Where the decision was taken (blank while open).")


class QuestionStatus(models.TextChoices):
    OPEN = "open", "open"
    ANSWERED = "answered", "answered"
    EXPIRED = "expired", "expired"
    CANCELED = "canceled", "canceled"


class ReconciliationStatus(models.TextChoices):
    OPEN = "open", "open"
    RESOLVED = "resolved", "resolved"
    CANCELED = "canceled", "canceled"


def one_per_step(waiting: str, name: str) -> models.UniqueConstraint:
    """At most one request per step in the `waiting` status."""
    return models.UniqueConstraint(
        fields=["step"], condition=models.Q(status=waiting), name=name
    )


class HumanRequest(models.Model):
    """What the three requests share: the tenant, the task version they were
    opened at, when, newest first, and one inbox index each (`<class>_inbox`).
    Each names its own `task` and `step`: their related names differ, and a
    `%(class)s` pattern would be a migration of its own."""

    tenant = models.ForeignKey("tasks_app.Tenant", on_delete=models.CASCADE, related_name="+")
    task_version = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["-id"]
        indexes = [models.Index(fields=["tenant", "status", "-id"], name="%(class)s_inbox")]


class Approval(HumanRequest):
    task = models.ForeignKey("tasks_app.Task", on_delete=models.CASCADE, related_name="approvals")
    step = models.ForeignKey("tasks_app.Step", on_delete=models.CASCADE, related_name="approvals")
    status = models.CharField(max_length=12, choices=Decision.choices, default=Decision.PENDING)
    tool = models.CharField(max_length=100)
    args = models.JSONField()
    args_hash = models.CharField(max_length=64)
    preview = models.JSONField(
        default=dict, help_text="What the reviewer is shown: risk, reason, cites."
    )
    task_version = models.PositiveIntegerField(help_text="The version the approval was opened at.")
    expires_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_role = models.CharField(max_length=16, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    comment = models.TextField(blank=True)
    edited_args = models.JSONField(null=True, blank=True)
    args_diff = models.JSONField(null=True, blank=True)
    response_output = models.JSONField(null=True, blank=True)
    always_allow = models.BooleanField(default=False)
    channel = channel_field()

    class Meta(HumanRequest.Meta):
        constraints = [one_per_step(Decision.PENDING, "approval_one_pending_per_step")]

    def __str__(self) -> str:
        return f"approval {self.pk} of {self.tool} ({self.status})"


class Question(HumanRequest):
    task = models.ForeignKey("tasks_app.Task", on_delete=models.CASCADE, related_name="questions")
    step = models.ForeignKey("tasks_app.Step", on_delete=models.CASCADE, related_name="questions")
    question = models.TextField()
    status = models.CharField(
        max_length=12, choices=QuestionStatus.choices, default=QuestionStatus.OPEN
    )
    answer = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    answered_role = models.CharField(max_length=16, blank=True)
    answered_at = models.DateTimeField(null=True, blank=True)
    channel = channel_field()

    # A question may expire (a workflow's human node with `expires_in`): then it
    # is closed unanswered and its task goes on (`reject`: the node fails) or
    # waits for an operator (`escalate`). `decisions.questions_expire`.
    expires_at = models.DateTimeField(null=True, blank=True)
    on_expiry = models.CharField(max_length=8, blank=True)

    class Meta(HumanRequest.Meta):
        constraints = [one_per_step(QuestionStatus.OPEN, "question_one_open_per_step")]

    def __str__(self) -> str:
        return f"question {self.pk} ({self.status})"


class Reconciliation(HumanRequest):
    task = models.ForeignKey(
        "tasks_app.Task", on_delete=models.CASCADE, related_name="reconciliations"
    )
    step = models.ForeignKey(
        "tasks_app.Step", on_delete=models.CASCADE, related_name="reconciliations"
    )
    status = models.CharField(
        max_length=12, choices=ReconciliationStatus.choices, default=ReconciliationStatus.OPEN
    )
    tool = models.CharField(max_length=100)
    args = models.JSONField()
    idempotency_key = models.CharField(max_length=64)
    status_answer = models.JSONField(null=True, blank=True)
    reason = models.CharField(max_length=200, blank=True)
    outcome = models.CharField(max_length=12, blank=True)
    output = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resolved_role = models.CharField(max_length=16, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    channel = channel_field()

    class Meta(HumanRequest.Meta):
        constraints = [
            one_per_step(ReconciliationStatus.OPEN, "reconciliation_one_open_per_step")
        ]

    def __str__(self) -> str:
        return f"reconciliation {self.pk} of {self.tool} ({self.status})"
