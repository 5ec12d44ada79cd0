"""Tasks and steps.

`Task.status` is a protected django-fsm field: it changes only through the
transition methods below, and those fire only inside the store
(`tasks_app.store.writes.fire_guard`), which also bumps `version` with an
optimistic check and writes the event row in the same transaction. A step's
status moves only as the step machine allows (`tasks_app.store.steps`).
The transition methods are pure guards: no side effects here.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django_fsm import FSMField, transition

from accounts_app.models import Tenant

from ..machine import NON_TERMINAL, TRANSITIONS, WAITING, TaskStatus
from .agents import AgentProfile

S = TaskStatus


def _t(event: str):  # type: ignore[no-untyped-def]
    sources, target = TRANSITIONS[event]
    return transition(field="status", source=list(sources), target=target)


class Task(models.Model):
    # Indexes are the ones in Meta: every index costs each write of a step, so a
    # column covered by a composite index gets none of its own.
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="tasks",
                               db_index=False)
    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The API key that submitted it (null: the console, a schedule, a key since
    # deleted): its scope narrows the requester's. Keys are revoked, not deleted,
    # so no index for SET_NULL's lookups (each index costs every task write).
    api_key = models.ForeignKey("accounts_app.ApiKey", null=True, blank=True,
                                on_delete=models.SET_NULL, related_name="+", db_index=False)
    # null: a workflow run (workflows_app), whose snapshot is its workflow's
    agent = models.ForeignKey(AgentProfile, on_delete=models.PROTECT, related_name="tasks",
                              null=True, blank=True)
    agent_snapshot = models.JSONField(default=dict)
    # The agent profile version the snapshot is (null: submitted before versions existed).
    agent_version = models.PositiveIntegerField(null=True, blank=True)
    goal = models.TextField()
    input = models.JSONField(default=dict, blank=True)
    # Who or what the task is about (an end user, a customer), as the client names
    # it: memory of one subject is shown only to that subject's tasks.
    subject = models.CharField(max_length=200, blank=True, default="", db_default="")
    script = models.JSONField(null=True, blank=True)

    status = FSMField(default=S.CREATED, choices=S.choices, protected=True)
    version = models.PositiveIntegerField(default=0)

    steps_count = models.PositiveIntegerField(default=0)
    model_calls = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    tokens = models.PositiveIntegerField(default=0)
    # Usage split by direction and its cost (`tasks_app.pricing`: integer pico-dollars,
    # 1e-12 USD, exact), counted by `services.spend` as each model reply arrives.
    input_tokens = models.BigIntegerField(default=0, db_default=0)
    output_tokens = models.BigIntegerField(default=0, db_default=0)
    cached_input_tokens = models.BigIntegerField(default=0, db_default=0)
    cost_pico = models.BigIntegerField(default=0, db_default=0)
    per_tool = models.JSONField(default=dict, blank=True)
    budget_extension = models.JSONField(default=dict, blank=True)
    # no-progress detection: fingerprint of the last tool call and how often it repeated,
    # and how many steps in a row produced nothing new.
    last_call_hash = models.CharField(max_length=64, blank=True)
    repeat_count = models.PositiveIntegerField(default=0)
    stale_steps = models.PositiveIntegerField(default=0)
    # unexpected errors in a row while the task stood at `fault_at` ("version/steps");
    # bounded by TETHER_STEP_ERROR_RETRIES (`runner.faults`)
    fault_attempts = models.PositiveIntegerField(default=0, db_default=0)
    fault_at = models.CharField(max_length=40, blank=True, default="", db_default="")
    # a model's failures in a row, where the task stands ("version/steps"): the
    # backoff grows with them across slices (runner.backoff)
    model_failures = models.PositiveIntegerField(default=0, db_default=0)
    model_failure_at = models.CharField(max_length=40, blank=True, default="", db_default="")

    deadline_at = models.DateTimeField(null=True, blank=True)
    lease_owner = models.CharField(max_length=128, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    trace_id = models.CharField(max_length=32)

    result = models.JSONField(null=True, blank=True)
    failure_reason = models.CharField(max_length=64, blank=True)
    failure_detail = models.JSONField(null=True, blank=True)

    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    request_hash = models.CharField(max_length=64, blank=True)

    # A retry (`tasks_app.retries`): the task it continues, from which step, and the
    # root of its retry chain, whose calls its keys may reuse (`retries.lineage`).
    retry_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="retried_by")
    retry_from_step = models.PositiveIntegerField(null=True, blank=True)
    key_lineage = models.BigIntegerField(null=True, blank=True)

    # A child task (a workflow's agent node, an agent called as a tool): the task
    # that started it and the step of that task it answers; its depth from the root.
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                               related_name="children", db_index=False)
    parent_step_no = models.PositiveIntegerField(null=True, blank=True)
    depth = models.PositiveSmallIntegerField(default=0, db_default=0)

    # An evaluation run (`evals_app`): a shadow task replaying the recorded task
    # `shadow_of` with a candidate version. Its tools answer from that task's
    # ledger, nothing real is done (`runner.shadow`), and it is left out of the
    # dashboard's figures, the spend rollup and notifications. No foreign key: a
    # recorded task may be purged while the evaluation that replayed it is kept.
    shadow_of = models.BigIntegerField(null=True, blank=True)
    # An unmatched read-only call goes to the real tool (else: "not recorded").
    shadow_live_reads = models.BooleanField(default=False, db_default=False)

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # A FAILED task's compensation not known to have run: when the recovery sweep
    # hands it to a worker again (`runner.compensation`). Set by the FAILED
    # transition, cleared when a compensation run ends.
    compensation_due_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="task_unique_submission_key",
            )
        ]
        indexes = [
            # console list: newest first within a tenant, optionally by status
            models.Index(fields=["tenant", "-id"], name="task_tenant_recent"),
            models.Index(fields=["tenant", "status", "-id"], name="task_tenant_status"),
            models.Index(fields=["tenant", "agent", "-id"], name="task_tenant_agent"),
            # the subject filter (most tasks have none)
            models.Index(fields=["tenant", "subject", "-id"], name="task_tenant_subject",
                         condition=~models.Q(subject="")),
            # comparing an agent's versions on their tasks, and the agent_version filter
            models.Index(fields=["agent", "agent_version"], name="task_agent_version"),
            # admission (FIFO over CREATED) and the recovery sweep (the RUNNING rows,
            # at most MAX_RUNNING_TASKS, filtered on their lease). No index holds the
            # lease's columns: taking and releasing it stay HOT updates (no index
            # entries written), not an insert into each of the table's indexes.
            models.Index(fields=["status", "id"], name="task_status_fifo"),
            # weighted fair admission: the tenants that have tasks waiting (a skip
            # scan) and each one's oldest; only the CREATED rows, so it stays small
            models.Index(fields=["tenant", "id"], name="task_waiting_by_tenant",
                         condition=models.Q(status=S.CREATED)),
            models.Index(fields=["id"], name="task_waiting_children",
                         condition=models.Q(status=S.CREATED, parent__isnull=False)),
            models.Index(fields=["trace_id"], name="task_trace"),  # exact lookups only
            # the tasks of one retry chain (few rows; most tasks have none)
            models.Index(fields=["key_lineage"], name="task_key_lineage",
                         condition=models.Q(key_lineage__isnull=False)),
            # a task's children (few rows; most tasks have none)
            models.Index(fields=["parent"], name="task_parent",
                         condition=models.Q(parent__isnull=False)),
            # evaluation runs (few rows; most tasks are live)
            models.Index(fields=["shadow_of"], name="task_shadow_of",
                         condition=models.Q(shadow_of__isnull=False)),
            # the sweep's lost compensations (a few rows at most: cleared when each runs)
            models.Index(fields=["compensation_due_at"], name="task_compensation_due",
                         condition=models.Q(compensation_due_at__isnull=False)),
        ]

    def __str__(self) -> str:
        return f"task {self.pk} ({self.status})"

    @property
    def is_terminal(self) -> bool:
        return self.status not in NON_TERMINAL

    @property
    def is_waiting(self) -> bool:
        return self.status in WAITING

    # --- transitions: pure guards, generated from machine.TRANSITIONS -------------
    @_t("task_started")
    def task_started(self) -> None: ...

    @_t("need_input")
    def need_input(self) -> None: ...

    @_t("input_received")
    def input_received(self) -> None: ...

    @_t("need_approval")
    def need_approval(self) -> None: ...

    @_t("approval_granted")
    def approval_granted(self) -> None: ...

    @_t("approval_rejected")
    def approval_rejected(self) -> None: ...

    @_t("step_succeeded")
    def step_succeeded(self) -> None: ...

    @_t("retryable_error")
    def retryable_error(self) -> None: ...

    @_t("result_uncertain")
    def result_uncertain(self) -> None: ...

    @_t("reconciled")
    def reconciled(self) -> None: ...

    @_t("escalated")
    def escalated(self) -> None: ...

    @_t("resumed")
    def resumed(self) -> None: ...

    @_t("final_accepted")
    def final_accepted(self) -> None: ...

    @_t("fatal_error")
    def fatal_error(self) -> None: ...

    @_t("budget_exhausted")
    def budget_exhausted(self) -> None: ...

    @_t("deadline_exceeded")
    def deadline_exceeded(self) -> None: ...

    @_t("task_canceled")
    def task_canceled(self) -> None: ...


class StepKind(models.TextChoices):
    TOOL = "tool"
    ASK = "ask"
    FINAL = "final"
    INVALID = "invalid"
    MEMORY = "memory"  # a `remember` decision: a memory write, written or proposed
    READ = "read"  # a `read_source` decision: an original read back by its reference


class StepStatus(models.TextChoices):
    PENDING_APPROVAL = "PENDING_APPROVAL"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    RETRYING = "RETRYING"
    UNCERTAIN = "UNCERTAIN"
    REJECTED = "REJECTED"
    DISCARDED = "DISCARDED"


OPEN_STEP_STATUSES = (
    StepStatus.PENDING_APPROVAL,
    StepStatus.RUNNING,
    StepStatus.RETRYING,
    StepStatus.UNCERTAIN,
)


class Step(models.Model):
    """One model decision and what came of it. The decision is persisted before
    its tool runs and is reused, never re-asked, if the step is resumed."""

    # indexed by (task, step_no), the unique constraint below
    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="steps", db_index=False)
    step_no = models.PositiveIntegerField()
    kind = models.CharField(max_length=8, choices=StepKind.choices)
    status = models.CharField(max_length=20, choices=StepStatus.choices)
    decision = models.JSONField(default=dict)
    # model call log: backend, model, latency_ms, tokens, input summary, raw output
    model_log = models.JSONField(default=dict, blank=True)
    tool = models.CharField(max_length=100, blank=True)
    args = models.JSONField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=64, blank=True)  # looked up in the ledger
    attempt = models.PositiveIntegerField(default=0)
    output = models.JSONField(null=True, blank=True)
    output_hash = models.CharField(max_length=64, blank=True)
    error = models.JSONField(null=True, blank=True)
    late_output = models.JSONField(
        null=True, blank=True, help_text="A discarded late result, for audit."
    )
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    # A step a retry inherited (copied, never run again): the original step.
    inherited_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+", db_index=False)

    class Meta:
        ordering = ["step_no"]
        constraints = [models.UniqueConstraint(fields=["task", "step_no"], name="step_unique_no")]
        # Partial: the steps the runner inserts (inherited_from NULL) pay for no index entry.
        indexes = [models.Index(fields=["inherited_from"], name="step_inherited_from",
                                condition=models.Q(inherited_from__isnull=False))]

    def __str__(self) -> str:
        return f"step {self.step_no} of task {self.task_id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STEP_STATUSES
