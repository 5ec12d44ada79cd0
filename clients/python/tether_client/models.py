"""Tether's API models, generated from its OpenAPI schema by
`python -m tether_client._codegen`; do not edit by hand (see that module)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """Fields the schema does not list yet are kept, not refused."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


APPROVAL_STATUS_ENUM: tuple[str, ...] = (
    "pending",
    "approved",
    "rejected",
    "responded",
    "expired",
    "canceled",
)
DECISION_KIND_ENUM: tuple[str, ...] = (
    "tool_call",
    "final",
    "ask_user",
    "invalid",
    "fail",
    "remember",
    "read_source",
)
MEMORY_POLICY_ENUM: tuple[str, ...] = (
    "off",
    "read",
    "propose",
    "auto",
)
ON_EXHAUSTION_ENUM: tuple[str, ...] = (
    "fail",
    "escalate",
)
OPEN_REQUEST_KIND_ENUM: tuple[str, ...] = (
    "question",
    "approval",
    "reconciliation",
)
QUESTION_STATUS_ENUM: tuple[str, ...] = (
    "open",
    "answered",
    "expired",
    "canceled",
)
RISK_ENUM: tuple[str, ...] = (
    "low",
    "medium",
    "high",
)
SIDE_EFFECT_ENUM: tuple[str, ...] = (
    "read",
    "idempotent_write",
    "write",
)
STATE_ENUM: tuple[str, ...] = (
    "closed",
    "open",
    "half_open",
)
STEP_STATUS_ENUM: tuple[str, ...] = (
    "PENDING_APPROVAL",
    "RUNNING",
    "SUCCEEDED",
    "FAILED",
    "RETRYING",
    "UNCERTAIN",
    "REJECTED",
    "DISCARDED",
)
TASK_STATUS_ENUM: tuple[str, ...] = (
    "CREATED",
    "RUNNING",
    "WAITING_FOR_INPUT",
    "WAITING_FOR_APPROVAL",
    "WAITING_FOR_RECONCILIATION",
    "WAITING_FOR_HUMAN",
    "SUCCEEDED",
    "FAILED",
    "CANCELED",
)
TOOL_KIND_ENUM: tuple[str, ...] = (
    "python",
    "http",
    "mcp",
)
WORKFLOW_NODE_STATUS_ENUM: tuple[str, ...] = (
    "pending",
    "waiting",
    "succeeded",
    "failed",
    "skipped",
    "not_run",
    "canceled",
)


class Usage(Model):
    steps: int
    model_calls: int
    tool_calls: int
    tokens: int
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost: str
    per_tool: dict[str, int]


class RetryOf(Model):
    task: int
    step_no: int


class Task(Model):
    id: int
    status: str
    version: int
    goal: str
    agent: str | None
    agent_version: int | None
    input: dict[str, Any]
    subject: str
    result: Any
    failure_reason: str
    failure_detail: Any
    trace_id: str
    requester: str | None
    usage: Usage
    budget: dict[str, Any]
    deadline_at: datetime | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    retry_of: RetryOf | None
    parent: int | None


class OpenRequest(Model):
    kind: str
    id: int
    question: str | None = None
    tool: str | None = None


class WorkflowNode(Model):
    id: str
    kind: str
    status: str
    output: Any
    error: Any
    steps: list[int]
    task: int | None
    tasks: list[int]
    started_at: datetime | None
    finished_at: datetime | None


class TaskDetail(Task):
    open_request: OpenRequest | None
    retried_by: list[int]
    children: list[int]
    workflow: str | None
    workflow_version: int | None
    nodes: list[WorkflowNode] | None
    api_key: str | None


class TaskPage(Model):
    next: str | None
    previous: str | None
    results: list[Task]


class Event(Model):
    id: int
    type: str
    task_version: int
    actor: str
    actor_role: str
    payload: dict[str, Any]
    trace_id: str
    created_at: datetime


class EventPage(Model):
    results: list[Event]
    next_after: int
    has_more: bool


class Decision(Model):
    kind: str
    tool: str | None = None
    args: dict[str, Any] | None = None
    reason: str | None = None
    cites: list[str] | None = None
    memory: dict[str, Any] | None = None
    ref: str | None = None
    result: Any = None
    question: str | None = None
    raw: str | None = None
    error: str | None = None


class StepUsage(Model):
    input_tokens: int
    output_tokens: int
    cached_input_tokens: int
    cost: str
    priced: bool


class ModelLog(Model):
    backend: str | None = None
    model: str | None = None
    latency_ms: int | None = None
    tokens: int | None = None
    input_summary: str | None = None
    raw: str | None = None
    used_fallback: bool | None = None
    attempts: int | None = None
    usage: StepUsage | None = None
    memory_shown: list[str] | None = None
    from_reply_of_step: int | None = None
    queued: list[Decision] | None = None


class Step(Model):
    id: int
    step_no: int
    kind: str
    status: str
    decision: Decision
    tool: str
    args: Any
    idempotency_key: str
    attempt: int
    output: Any
    error: Any
    late_output: Any
    model_log: ModelLog
    started_at: datetime
    finished_at: datetime | None
    latency_ms: int | None


class StepPage(Model):
    results: list[Step]
    next_after: int
    has_more: bool


class Approval(Model):
    id: int
    task: int
    step: int
    step_no: int
    status: str
    tool: str
    args: dict[str, Any]
    preview: dict[str, Any]
    task_version: int
    expires_at: datetime | None
    decided_by: str | None
    decided_role: str
    decided_at: datetime | None
    channel: str
    comment: str
    edited_args: Any
    args_diff: Any
    response_output: Any
    always_allow: bool
    created_at: datetime
    kind: str
    rule: Any
    approvals_required: int
    approvals_given: list[dict[str, Any]]
    group: str | None
    group_required: bool
    assignee: str | None
    on_expiry: str


class ApprovalPage(Model):
    next: str | None
    previous: str | None
    results: list[Approval]


class Question(Model):
    id: int
    task: int
    step: int
    question: str
    status: str
    answer: str
    answered_by: str | None
    answered_role: str
    answered_at: datetime | None
    channel: str
    task_version: int
    created_at: datetime


class QuestionPage(Model):
    next: str | None
    previous: str | None
    results: list[Question]


class InboxItem(Model):
    kind: str
    id: int
    key: str
    created_at: datetime
    expires_at: datetime | None
    task: dict[str, Any]
    facts: dict[str, Any]
    actions: list[dict[str, Any]]


class Inbox(Model):
    items: list[InboxItem]
    counts: dict[str, int]
    total: int


class BreakerState(Model):
    state: str
    failures: int
    open_until: datetime | None
    opened_count: int
    waiting_tasks: int


class Tool(Model):
    name: str
    description: str
    kind: str
    target: str
    url: str
    status_url: str
    status_tool: str
    compensation_tool: str
    resource: str
    secret_headers: dict[str, str]
    args_schema: dict[str, Any]
    result_schema: dict[str, Any]
    side_effect: str
    risk: str
    requires_approval: bool
    timeout_s: float
    max_retries: int
    retry_delays_s: list[float]
    breaker: dict[str, Any]
    breaker_state: BreakerState | None
    rate_limit: dict[str, int]
    enabled: bool
    mcp_server: str | None
    mcp_hints: dict[str, bool]
    review: str
    created_at: datetime
    updated_at: datetime


class ModelOut(Model):
    backend: str
    name: str | None
    base_url: str | None
    api_key_env: str | None
    api_key_secret: str | None
    temperature: float | None
    top_p: float | None
    system_prompt: str | None
    timeout_s: float | None
    max_retries: int | None
    prices: dict[str, str] | None
    fallback: dict[str, Any] | None
    breaker: dict[str, Any] | None


class BudgetOut(Model):
    max_steps: int
    max_model_calls: int
    max_tool_calls: int
    max_tokens: int
    max_duration_s: int
    per_tool: dict[str, int]
    max_concurrent_tasks: int
    max_cost: str | None


class CompletionCheck(Model):
    tool: str
    args: dict[str, Any] | None = None


class Release(Model):
    candidate: int | None = None
    percent: int


class ModelBreakers(Model):
    primary: BreakerState | None = None
    fallback: BreakerState | None = None


class Agent(Model):
    name: str
    description: str
    model: ModelOut
    tools: list[str]
    budget: BudgetOut
    on_exhaustion: str
    approval_sla_s: int
    approval_on_expiry: str
    allow_self_approval: bool
    no_progress_repeats: int
    no_progress_window: int
    result_schema: dict[str, Any]
    memory_policy: str
    completion_checks: list[CompletionCheck]
    max_completion_attempts: int
    min_confidence: float | None
    enabled: bool
    published: bool
    release_gate: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    version: int
    latest_version: int
    release: Release | None
    breaker_state: ModelBreakers


class ErrorDetail(Model):
    code: str
    message: str
    details: dict[str, Any]


class Error(Model):
    error: ErrorDetail
