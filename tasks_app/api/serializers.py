"""Input and output shapes of the task endpoints (docs/reference/api.md).

Output serializers render; input serializers check types and bounds only.
Every decision about what is allowed is the services' (`tasks_app.services`).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from foundations.api_base import ExpectedVersionMixin
from tasks_app.machine import NON_TERMINAL, TaskStatus
from tasks_app.models import Step, StepStatus, Task
from tasks_app.pricing import money, money_text, pico_text
from workflows_app.orchestrator import run_nodes

from ..services.batches import MAX_BATCH

MAX_GOAL = 10_000
MAX_TEXT = 10_000
MAX_SCRIPT = 5_000
MAX_SUBJECT = 200
# An Idempotency-Key: the header of a single submission, a field of a batch's task.
IDEMPOTENCY_KEY_PATTERN = r"\A[\x21-\x7e]{1,200}\Z"
SUBJECT_HELP = ("Who or what the task is about (an end user, a customer), as the client names it: "
                "1-200 printable characters. The task sees only this subject's memory.")


def subject_field(**kwargs: Any) -> serializers.RegexField:
    """A subject: printable, no leading or trailing space (the memory scope's key)."""
    kwargs.setdefault("help_text", SUBJECT_HELP)
    kwargs.setdefault("trim_whitespace", False)  # checked as given: a key, not prose
    return serializers.RegexField(
        r"^[^\s\x00-\x1f\x7f](?:[^\x00-\x1f\x7f]*[^\s\x00-\x1f\x7f])?$",
        max_length=MAX_SUBJECT,
        error_messages={"invalid": "1-200 printable characters, no leading or trailing space"},
        **kwargs)


# --- output ---------------------------------------------------------------------------


class UsageSerializer(serializers.Serializer):
    steps = serializers.IntegerField()
    model_calls = serializers.IntegerField()
    tool_calls = serializers.IntegerField()
    tokens = serializers.IntegerField()
    input_tokens = serializers.IntegerField(help_text="Prompt tokens of every model call.")
    output_tokens = serializers.IntegerField(help_text="Completion tokens of every model call.")
    cached_input_tokens = serializers.IntegerField(
        help_text="Of the input tokens, those the provider served from its cache.")
    cost = serializers.CharField(
        help_text="Dollars spent on model calls at the agent's prices, exact (a decimal string).")
    per_tool = serializers.DictField(
        child=serializers.IntegerField(), help_text="{tool name: calls}"
    )


class RetryOfSerializer(serializers.Serializer):
    task = serializers.IntegerField(help_text="The task this one retries.")
    step_no = serializers.IntegerField(help_text="The step it retried from.")


class TaskSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=TaskStatus.choices)
    version = serializers.IntegerField(
        help_text="Bumped by every transition; send it back as `expected_version` on human actions."
    )
    goal = serializers.CharField()
    agent = serializers.SerializerMethodField()
    agent_version = serializers.IntegerField(
        allow_null=True, help_text="The agent profile version this task runs with."
    )
    input = serializers.DictField(child=serializers.JSONField())
    subject = serializers.CharField(allow_blank=True,
                                    help_text='Who the task is about ("": none).')
    result = serializers.JSONField(allow_null=True)
    failure_reason = serializers.CharField(allow_blank=True)
    failure_detail = serializers.JSONField(allow_null=True)
    trace_id = serializers.CharField()
    requester = serializers.SerializerMethodField()
    usage = serializers.SerializerMethodField()
    budget = serializers.SerializerMethodField()
    deadline_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    retry_of = serializers.SerializerMethodField()
    # (a declared field leaves the class: DRF's own `Field.parent` is not shadowed)
    parent = serializers.IntegerField(  # type: ignore[assignment]
        source="parent_id", allow_null=True,
        help_text="The task that started this one (a child task: an agent node, an agent "
                  "called as a tool); null for a task submitted by a person or a schedule.")

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_agent(self, task: Task) -> str | None:
        """The agent; null for a workflow run (`workflow`)."""
        return task.agent.name if task.agent is not None else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_requester(self, task: Task) -> str | None:
        return task.requester.get_username() if task.requester_id and task.requester else None

    @extend_schema_field(RetryOfSerializer(allow_null=True))
    def get_retry_of(self, task: Task) -> dict[str, int] | None:
        if task.retry_of_id is None:
            return None
        return {"task": task.retry_of_id, "step_no": task.retry_from_step or 1}

    @extend_schema_field(UsageSerializer)
    def get_usage(self, task: Task) -> dict[str, Any]:
        return {
            "steps": task.steps_count,
            "model_calls": task.model_calls,
            "tool_calls": task.tool_calls,
            "tokens": task.tokens,
            "input_tokens": task.input_tokens,
            "output_tokens": task.output_tokens,
            "cached_input_tokens": task.cached_input_tokens,
            "cost": pico_text(task.cost_pico),
            "per_tool": dict(task.per_tool or {}),
        }

    @extend_schema_field(
        serializers.DictField(
            child=serializers.JSONField(),
            help_text="The budget frozen at submission, with any extension granted on resume.",
        )
    )
    def get_budget(self, task: Task) -> dict[str, Any]:
        budget = dict((task.agent_snapshot or {}).get("budget") or {})
        for key, extra in (task.budget_extension or {}).items():
            if isinstance(budget.get(key), int):
                budget[key] += extra
            elif key == "max_cost" and budget.get(key) is not None:
                zero = Decimal(0)
                budget[key] = money_text((money(budget[key]) or zero) + (money(extra) or zero))
        return budget


class OpenRequestSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["question", "approval", "reconciliation"])
    id = serializers.IntegerField()
    question = serializers.CharField(
        required=False, help_text="For a question: what the agent asks."
    )
    tool = serializers.CharField(required=False, help_text="For an approval or reconciliation.")


class WorkflowNodeSerializer(serializers.Serializer):
    id = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.ChoiceField(choices=["pending", "waiting", "succeeded", "failed",
                                              "skipped", "not_run", "canceled"])
    output = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    steps = serializers.ListField(child=serializers.IntegerField())
    task = serializers.IntegerField(allow_null=True,
                                    help_text="The latest child task (agent nodes).")
    tasks = serializers.ListField(child=serializers.IntegerField(),
                                  help_text="Every child task of the node, oldest first "
                                            "(a map over an agent: one per item and try).")
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


class TaskDetailSerializer(TaskSerializer):
    open_request = serializers.SerializerMethodField()
    retried_by = serializers.SerializerMethodField()
    children = serializers.SerializerMethodField()
    workflow = serializers.SerializerMethodField()
    workflow_version = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    api_key = serializers.SerializerMethodField()

    @extend_schema_field(serializers.CharField(
        allow_null=True, help_text="The prefix of the API key that submitted the task "
        "(its scope narrows the requester's); null: submitted otherwise."))
    def get_api_key(self, task: Task) -> str | None:
        return task.api_key.prefix if task.api_key_id and task.api_key else None

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_workflow(self, task: Task) -> str | None:
        """The workflow this task runs (null: an agent's task)."""
        return ((task.agent_snapshot or {}).get("workflow") or {}).get("name")

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_workflow_version(self, task: Task) -> int | None:
        return ((task.agent_snapshot or {}).get("workflow") or {}).get("version")

    @extend_schema_field(WorkflowNodeSerializer(many=True, allow_null=True))
    def get_nodes(self, task: Task) -> list[dict[str, Any]] | None:
        """A workflow run's nodes, in the order they run (null: an agent's task)."""
        if not (task.agent_snapshot or {}).get("workflow"):
            return None
        return list(WorkflowNodeSerializer(run_nodes(task), many=True).data)

    @extend_schema_field(serializers.ListField(
        child=serializers.IntegerField(), help_text="The tasks this one started, oldest first."))
    def get_children(self, task: Task) -> list[int]:
        return list(task.children.order_by("id").values_list("id", flat=True))

    @extend_schema_field(serializers.ListField(
        child=serializers.IntegerField(), help_text="The retries of this task, oldest first."))
    def get_retried_by(self, task: Task) -> list[int]:
        return list(task.retried_by.order_by("id").values_list("id", flat=True))

    @extend_schema_field(OpenRequestSerializer(allow_null=True))
    def get_open_request(self, task: Task) -> dict[str, Any] | None:
        return self.context.get("open_request")


class DecisionSerializer(serializers.Serializer):
    """The decision a step records; which fields are present depends on `kind`."""

    kind = serializers.ChoiceField(
        choices=["tool_call", "final", "ask_user", "invalid", "fail", "remember", "read_source"]
    )
    tool = serializers.CharField(
        required=False, help_text="tool_call; an invalid decision that was a malformed call."
    )
    args = serializers.DictField(child=serializers.JSONField(), required=False)
    reason = serializers.CharField(required=False, allow_blank=True, help_text="tool_call.")
    cites = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="tool_call, remember, read_source: ids of the context items it relies on "
        "(`step:N`, `event:N`, `summary:vN`, `mem:<id>@<version>`, pinned facts).",
    )
    memory = serializers.DictField(required=False, help_text="remember: the proposed item.")
    ref = serializers.CharField(required=False, help_text="read_source: the id read back.")
    result = serializers.JSONField(required=False, allow_null=True, help_text="final.")
    question = serializers.CharField(required=False, help_text="ask_user.")
    raw = serializers.CharField(
        required=False, allow_blank=True, help_text="invalid: the output not accepted."
    )
    error = serializers.CharField(
        required=False, allow_blank=True, help_text="invalid: why it was not accepted."
    )


class StepUsageSerializer(serializers.Serializer):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cached_input_tokens = serializers.IntegerField()
    cost = serializers.CharField(help_text="Dollars, exact.")
    priced = serializers.BooleanField()


class ModelLogSerializer(serializers.Serializer):
    """The model call behind a step; a step taken from an earlier reply (several tool
    calls in one response) has only `from_reply_of_step` and `queued`."""

    backend = serializers.CharField(required=False)
    model = serializers.CharField(required=False, allow_blank=True)
    latency_ms = serializers.IntegerField(required=False)
    tokens = serializers.IntegerField(required=False)
    input_summary = serializers.CharField(
        required=False, allow_blank=True, help_text="What the model was given, in brief."
    )
    raw = serializers.CharField(
        required=False, allow_blank=True, help_text="The raw reply (first 8000 characters)."
    )
    used_fallback = serializers.BooleanField(
        required=False, help_text="The fallback model answered."
    )
    attempts = serializers.IntegerField(required=False)
    usage = StepUsageSerializer(
        required=False, help_text="The call's tokens by direction and its cost (priced: the "
        "model had prices)."
    )
    memory_shown = serializers.ListField(
        child=serializers.CharField(), required=False,
        help_text="The memory items the model was shown (`mem:<id>@<version>`); the "
        "decision's `cites` say which it relied on."
    )
    from_reply_of_step = serializers.IntegerField(required=False)
    queued = DecisionSerializer(
        many=True, required=False, help_text="Decisions of the same reply still to be taken."
    )


class StepSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    step_no = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.ChoiceField(choices=StepStatus.choices)
    # Both are rendered as stored (nothing dropped); the schema documents their shape.
    decision = serializers.SerializerMethodField()
    tool = serializers.CharField(allow_blank=True)
    args = serializers.JSONField(allow_null=True)
    idempotency_key = serializers.CharField(allow_blank=True)
    attempt = serializers.IntegerField()
    output = serializers.JSONField(allow_null=True)
    error = serializers.JSONField(allow_null=True)
    late_output = serializers.JSONField(
        allow_null=True, help_text="A result that came too late (audit)."
    )
    model_log = serializers.SerializerMethodField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    latency_ms = serializers.IntegerField(allow_null=True)

    @extend_schema_field(DecisionSerializer)
    def get_decision(self, step: Step) -> dict[str, Any]:
        return dict(step.decision or {})

    @extend_schema_field(ModelLogSerializer)
    def get_model_log(self, step: Step) -> dict[str, Any]:
        return dict(step.model_log or {})


class EventSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    type = serializers.CharField()
    task_version = serializers.IntegerField()
    actor = serializers.CharField()
    actor_role = serializers.CharField(allow_blank=True)
    payload = serializers.DictField(child=serializers.JSONField())
    trace_id = serializers.CharField()
    created_at = serializers.DateTimeField()


class SummarySerializer(serializers.Serializer):
    version = serializers.IntegerField()
    text = serializers.CharField(allow_blank=True)
    covers_until_step = serializers.IntegerField(help_text="The last step folded in.")
    event_ids = serializers.ListField(
        child=serializers.IntegerField(), help_text="The events this version was built from."
    )
    active = serializers.BooleanField(help_text="False once rolled back past (kept for audit).")
    in_use = serializers.BooleanField(help_text="The version the context uses now.")
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    fact_check = serializers.DictField(
        help_text="The check of the facts read from the originals: `checked`, `kept` (in the "
        "text or already pinned), `pinned_now`, `pinned_total`, and `refused` (the model's "
        "summary that dropped facts and was not used, with what it dropped)."
    )
    pinned_facts = serializers.ListField(
        child=serializers.DictField(),
        help_text="Facts pinned verbatim with this version: `text`, `kind`, `step_no`, "
        "`event_ids`.",
    )


class SummaryRollbackResultSerializer(serializers.Serializer):
    task_id = serializers.IntegerField()
    version = serializers.IntegerField(help_text="The version now in use (0: none).")
    from_version = serializers.IntegerField(help_text="The version that was in use before.")
    deactivated = serializers.ListField(child=serializers.IntegerField())
    event_id = serializers.IntegerField(help_text="The `summary_rolled_back` event.")


class BulkCancelResultSerializer(serializers.Serializer):
    matched = serializers.IntegerField(help_text="Unfinished tasks that matched (up to `limit`).")
    canceled = serializers.ListField(child=serializers.IntegerField())
    skipped = serializers.ListField(
        child=serializers.IntegerField(), help_text="Tasks that ended or moved on meanwhile."
    )
    more = serializers.BooleanField(help_text="More unfinished tasks match: call again.")


# --- input ----------------------------------------------------------------------------


class TaskSubmitSerializer(serializers.Serializer):
    goal = serializers.CharField(max_length=MAX_GOAL, required=False, default="",
                                 help_text="Required with `agent`.")
    agent = serializers.CharField(max_length=64, required=False,
                                  help_text="The agent that runs the task; or `workflow`.")
    workflow = serializers.CharField(max_length=100, required=False,
                                     help_text="Run this workflow instead of an agent.")
    input = serializers.DictField(child=serializers.JSONField(), required=False, default=dict)
    subject = subject_field(required=False, default="")
    script = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        allow_null=True,
        default=None,
        max_length=MAX_SCRIPT,
        help_text="For scripted agents: one entry per model call, "
        '`{"tool", "args"}`, `{"ask"}`, `{"final"}`, `{"remember": {...}}`, '
        '`{"read_source": "step:N"}` or `{"invalid"}`.',
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if bool(attrs.get("agent")) == bool(attrs.get("workflow")):
            raise serializers.ValidationError({"agent": ["give either `agent` or `workflow`"]})
        if attrs.get("agent") and not attrs.get("goal"):
            raise serializers.ValidationError({"goal": ["a task for an agent needs a goal"]})
        if attrs.get("workflow") and attrs.get("script") is not None:
            raise serializers.ValidationError({"script": ["a workflow run takes no script"]})
        if attrs.get("workflow") and attrs.get("subject"):
            raise serializers.ValidationError({"subject": ["a workflow run takes no subject"]})
        return attrs


class BatchTaskSerializer(TaskSubmitSerializer):
    """One task of a batch: what a single submission takes, with its own key."""

    idempotency_key = serializers.RegexField(
        IDEMPOTENCY_KEY_PATTERN, max_length=200,
        help_text="1-200 printable ASCII characters, unique within the batch: "
        "what the Idempotency-Key header is to a single submission.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("workflow"):
            raise serializers.ValidationError(
                {"workflow": ["a batch takes agent tasks; submit a workflow run on its own"]})
        return super().validate(attrs)


class BatchSubmitSerializer(serializers.Serializer):
    tasks: serializers.ListSerializer[Any] = serializers.ListSerializer(
        child=BatchTaskSerializer(), min_length=1, max_length=MAX_BATCH,
        help_text=f"1 to {MAX_BATCH} tasks, submitted all or none.")


class BatchEntrySerializer(serializers.Serializer):
    index = serializers.IntegerField(help_text="Its place in the request's `tasks`.")
    task_id = serializers.IntegerField()
    created = serializers.BooleanField(
        help_text="False: its key was used before with the same body; this is that task.")


class BatchResultSerializer(serializers.Serializer):
    tasks = BatchEntrySerializer(many=True)


class TaskFilterSerializer(serializers.Serializer):
    status = serializers.MultipleChoiceField(
        choices=TaskStatus.choices, required=False, help_text="Repeat to match any of several."
    )
    agent = serializers.CharField(max_length=64, required=False)
    agent_version = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, required=False,
        help_text="Tasks that ran with this version of their agent (with `agent`: of that agent).",
    )
    created_after = serializers.DateTimeField(required=False, help_text="Created at or after.")
    created_before = serializers.DateTimeField(required=False, help_text="Created before.")
    trace_id = serializers.CharField(max_length=64, required=False)
    subject = subject_field(required=False)
    parent = serializers.IntegerField(  # type: ignore[assignment]  # see TaskSerializer
        min_value=1, required=False,
        help_text="The child tasks of this task (agent nodes, agents called as tools).")
    mine = serializers.BooleanField(
        required=False, default=False, help_text="Only the tasks the caller submitted."
    )


class BulkCancelSerializer(serializers.Serializer):
    status = serializers.MultipleChoiceField(choices=[(s, s) for s in NON_TERMINAL], required=False)
    agent = serializers.CharField(max_length=64, required=False)
    created_after = serializers.DateTimeField(required=False)
    created_before = serializers.DateTimeField(required=False)
    trace_id = serializers.CharField(max_length=64, required=False)
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    limit = serializers.IntegerField(min_value=1, max_value=1000, required=False, default=500)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not any(
            attrs.get(k) for k in ("status", "agent", "created_after", "created_before", "trace_id")
        ):
            raise serializers.ValidationError(
                {
                    "non_field_errors": [
                        "give at least one filter (status, agent, created range, trace_id)"
                    ]
                }
            )
        return attrs


class CancelSerializer(ExpectedVersionMixin):
    reason = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class InputSerializer(ExpectedVersionMixin):
    answer = serializers.CharField(max_length=MAX_TEXT, trim_whitespace=False)


class BudgetExtensionSerializer(serializers.Serializer):
    max_steps = serializers.IntegerField(min_value=0, max_value=10**6, required=False)
    max_model_calls = serializers.IntegerField(min_value=0, max_value=10**6, required=False)
    max_tool_calls = serializers.IntegerField(min_value=0, max_value=10**6, required=False)
    max_tokens = serializers.IntegerField(min_value=0, max_value=10**9, required=False)
    max_duration_s = serializers.IntegerField(min_value=0, max_value=10**7, required=False)
    max_cost = serializers.DecimalField(max_digits=16, decimal_places=6, min_value=0,
                                        max_value=10**7, required=False,
                                        help_text="Dollars to add to the cost budget.")


class ResumeSerializer(ExpectedVersionMixin):
    extend = BudgetExtensionSerializer(
        required=False, help_text="Budget to add, recorded on the event."
    )
    comment = serializers.CharField(
        max_length=MAX_TEXT, required=False, allow_blank=True, default=""
    )


class FailSerializer(ExpectedVersionMixin):
    reason = serializers.CharField(
        max_length=MAX_TEXT, required=False, allow_blank=True, default=""
    )


class SummaryRollbackSerializer(ExpectedVersionMixin):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
