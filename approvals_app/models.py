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

    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+")
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

    # What decided that a person must look (`policy`): the rule, how many distinct
    # reviewers, who is asked (a group, or one person after a reassignment), what
    # its expiry does. `authorization`: the call is outside its requester's scope.
    kind = models.CharField(max_length=16, default="tool")
    rule = models.JSONField(null=True, blank=True, help_text="The rule that applied, as it was.")
    approvals_required = models.PositiveSmallIntegerField(default=1)
    approvals_given = models.JSONField(default=list, blank=True)
    group = models.ForeignKey("ReviewerGroup", null=True, blank=True, on_delete=models.SET_NULL,
                              related_name="+")
    group_required = models.BooleanField(default=False)
    assignee = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="+")
    sla_s = models.PositiveIntegerField(default=0)
    on_expiry = models.CharField(max_length=8, blank=True)
    escalate_to = models.ForeignKey("ReviewerGroup", null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="+")

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


# --- Who decides: reviewer groups, approval rules, requesters' scopes -------------------
# The rules a tenant writes about its tool calls (`approvals_app.policy` applies
# them; `services.rules`, `services.groups`, `services.scopes` change them, audited).


class ReviewerGroup(models.Model):
    """A named set of reviewers of one tenant. Rules route their requests to a
    group (and `require_role` lets only its members decide); the tasks of the
    agents it lists route to it by default."""

    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+")
    name = models.SlugField(max_length=64)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="+")
    agents = models.JSONField(default=list, blank=True,
                              help_text="Agents whose requests route here by default.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"],
                                               name="reviewer_group_unique_name")]

    def __str__(self) -> str:
        return self.name


class RuleAction(models.TextChoices):
    ALLOW = "allow"
    REQUIRE_APPROVAL = "require_approval"
    REQUIRE_ROLE = "require_role"
    DENY = "deny"


class OnExpiry(models.TextChoices):
    REJECT = "reject"  # the call is rejected, the model is told, the task goes on
    ESCALATE = "escalate"  # to `escalate_to` (a second group), else to an operator
    FAIL = "fail"  # the task fails


class ApprovalRule(models.Model):
    """One rule of a tenant's ordered list: the first that matches a tool call
    decides it. An empty match list matches anything."""

    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+")
    position = models.PositiveIntegerField()
    name = models.SlugField(max_length=64)
    enabled = models.BooleanField(default=True)
    action = models.CharField(max_length=20, choices=RuleAction.choices)
    approvals = models.PositiveSmallIntegerField(default=1)
    group = models.ForeignKey(ReviewerGroup, null=True, blank=True, on_delete=models.PROTECT,
                              related_name="+")
    tools = models.JSONField(default=list, blank=True)
    risks = models.JSONField(default=list, blank=True)
    agents = models.JSONField(default=list, blank=True)
    requester_roles = models.JSONField(default=list, blank=True)
    requester_groups = models.JSONField(default=list, blank=True)
    condition = models.TextField(blank=True, help_text="A CEL expression over args, tool, agent.")
    message = models.CharField(max_length=300, blank=True, help_text="What `deny` tells the model.")
    sla_s = models.PositiveIntegerField(default=0, help_text="0: the agent's approval SLA.")
    on_expiry = models.CharField(max_length=8, choices=OnExpiry.choices, blank=True)
    escalate_to = models.ForeignKey(ReviewerGroup, null=True, blank=True,
                                    on_delete=models.PROTECT, related_name="+")
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "id"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"],
                                               name="approval_rule_unique_name")]

    def __str__(self) -> str:
        return f"rule {self.position} {self.name} ({self.action})"


class RequesterScope(models.Model):
    """What a user's tasks may do (their API keys act as them): the agents they
    may run and the tools their tasks may call; an empty list: no limit. A call
    outside it waits for an authorization (granted for that task only), decided
    by the admins or by `authorizers`."""

    tenant = models.ForeignKey("accounts_app.Tenant", on_delete=models.CASCADE, related_name="+")
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="requester_scope")
    agents = models.JSONField(default=list, blank=True)
    tools = models.JSONField(default=list, blank=True)
    authorizers = models.ForeignKey(ReviewerGroup, null=True, blank=True,
                                    on_delete=models.SET_NULL, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"scope of {self.user}"
