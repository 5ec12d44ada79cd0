"""Task use cases for API clients and operators: submit, cancel, resume, fail.
Answering a question is a human decision: `approvals_app.services.answers`."""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F

from approvals_app.policy import agent_allowed
from foundations.actors import Actor
from foundations.errors import DomainError, ErrorKind, conflict, invalid, not_found

from ..keys import canonical_json, sha256_hex
from ..machine import NON_TERMINAL
from ..models import AgentProfile, Task
from ..payloads import refusal
from ..pricing import MAX_BUDGET, money, money_problem, money_text
from ..store.creation import task_create
from ..store.tasks import Transitioned, task_transition
from .admission import admission_after_submission
from .agent_versions import version_for_submission
from .dispatch import schedule_advance_on_commit
from .quotas import spend_refusal

MAX_SCRIPT_ENTRIES = 5000


@dataclass(frozen=True)
class Submitted:
    task: Task
    created: bool


def task_submit(
    *,
    tenant_id: int,
    requester_id: int | None,
    agent: str,
    goal: str,
    input: dict[str, Any] | None = None,
    script: list[Any] | None = None,
    idempotency_key: str | None = None,
    subject: str = "",
    actor: Actor,
    api_key_id: int | None = None,
) -> Submitted:
    """Create a task in CREATED; admission starts it when a slot is free.

    With an `idempotency_key`, resubmitting the same body returns the same
    task; the same key with a different body is a conflict. The task's
    snapshot is the configuration of the profile version it gets
    (`agent_versions.version_for_submission`). `api_key_id`: the key the
    request came with, recorded on the task; its scope narrows the requester's.
    """
    body = submission_body(agent=agent, goal=goal, input=input, script=script, subject=subject)
    request_hash, earlier = earlier_submission(tenant_id, idempotency_key, body)
    if earlier is not None:
        return earlier
    spend_refusal(tenant_id)
    input_check(input)
    profile = submitted_profile(AgentProfile.objects.filter(tenant_id=tenant_id, name=agent)
                                .first(), agent, tenant_id=tenant_id, requester_id=requester_id,
                                api_key_id=api_key_id)
    # The version this task runs with (a release sends a share to its candidate): a pure
    # function of the Idempotency-Key when given, else of the task's random trace id.
    trace_id = secrets.token_hex(16)
    version = version_for_submission(profile, salt=idempotency_key or trace_id)
    script_check(version.config, agent, script)

    try:
        with transaction.atomic():
            task = task_create(
                actor=actor,
                agent_name=agent,
                tenant_id=tenant_id,
                requester_id=requester_id,
                api_key_id=api_key_id,
                agent=profile,
                agent_snapshot=version.config,
                agent_version=version.number,
                goal=goal,
                input=input or {},
                subject=subject,
                script=script,
                trace_id=trace_id,
                idempotency_key=idempotency_key or None,
                request_hash=request_hash,
            )
            admission_after_submission()
    except IntegrityError:
        # Two submissions with the same key raced; the other one won.
        existing = Task.objects.filter(tenant_id=tenant_id, idempotency_key=idempotency_key).first()
        if existing is None:
            raise
        return same_submission(existing, request_hash)
    return Submitted(task=task, created=True)


def submitted_profile(profile: AgentProfile | None, agent: str, *, tenant_id: int,
                      requester_id: int | None, api_key_id: int | None = None) -> AgentProfile:
    """The profile a submission names, if it may take tasks, and the requester
    may run it (its scope, narrowed by its key's: `approvals_app.policy`)."""
    if profile is None:
        raise invalid("invalid", "The request is not valid.", agent=[f"no agent named {agent!r}"])
    if not profile.enabled:
        raise invalid("invalid", "The request is not valid.",
                      agent=[f"agent {agent!r} is disabled"])
    if not agent_allowed(tenant_id=tenant_id, requester_id=requester_id, agent=agent,
                         api_key_id=api_key_id):
        message = f"your scope does not let you run the agent {agent!r}"
        raise DomainError("outside_scope", message, kind=ErrorKind.FORBIDDEN,
                          details={"agent": [message]})
    return profile


def input_check(input: dict[str, Any] | None) -> None:
    """An input larger than a task may store (`TETHER_TASK_PAYLOAD_MAX_BYTES`) is refused."""
    too_large = refusal(None, input)
    if too_large is not None:
        raise invalid("invalid", "The request is not valid.", input=[too_large["message"]])


def script_check(config: dict[str, Any], agent: str, script: list[Any] | None) -> None:
    """A scripted agent's task needs a script (of at most `MAX_SCRIPT_ENTRIES`);
    any other agent's takes none."""
    backend = (config.get("model") or {}).get("backend", "scripted")
    if backend == "scripted":
        if script is None:
            raise invalid("invalid", "The request is not valid.",
                          script=["a scripted agent needs a script: a list of decisions"])
        if len(script) > MAX_SCRIPT_ENTRIES:
            raise invalid("invalid", "The request is not valid.",
                          script=[f"at most {MAX_SCRIPT_ENTRIES} entries"])
    elif script is not None:
        raise invalid("invalid", "The request is not valid.",
                      script=[f"agent {agent!r} uses the {backend} backend; "
                              "a script is only for scripted agents"])


def submission_body(*, agent: str, goal: str, input: dict[str, Any] | None,
                    script: list[Any] | None, subject: str) -> dict[str, Any]:
    """What a submission's Idempotency-Key stands for (its hash is the task's `request_hash`)."""
    body = {"agent": agent, "goal": goal, "input": input or {}, "script": script}
    if subject:  # absent otherwise: the hashes of submissions without one are as they were
        body["subject"] = subject
    return body


def earlier_submission(tenant_id: int, idempotency_key: str | None,
                       body: dict[str, Any]) -> tuple[str, Submitted | None]:
    """The request's hash, and the task an earlier submission with this
    Idempotency-Key made (a conflict when its body differed), if any."""
    request_hash = sha256_hex(canonical_json(body))
    if not idempotency_key:
        return request_hash, None
    existing = Task.objects.filter(tenant_id=tenant_id, idempotency_key=idempotency_key).first()
    return request_hash, (same_submission(existing, request_hash) if existing else None)


def same_submission(existing: Task, request_hash: str) -> Submitted:
    """A submission under a key used before: the same task, if the body is the same."""
    if existing.request_hash != request_hash:
        raise conflict("idempotency_key_reused",
                       "this Idempotency-Key was used for a different request", task_id=existing.pk)
    return Submitted(task=existing, created=False)


def task_cancel(*, task_id: int, actor: Actor, expected_version: int | None = None,
                reason: str = "") -> Transitioned:
    """Cancel: every open step gets a typed "canceled" result and its late
    result, if one ever comes, is discarded at commit."""
    return task_transition(
        task_id=task_id, event="task_canceled", actor=actor, expected_version=expected_version,
        payload={"reason": reason}, fields={"failure_reason": "canceled"},
    )


def task_cancel_many(
    *, task_ids: list[int], actor: Actor, reason: str = ""
) -> dict[str, list[int]]:
    """Bulk cancel: each task in its own transaction; a task that ended meanwhile is skipped."""
    canceled, skipped = [], []
    for task_id in task_ids:
        try:
            task_cancel(task_id=task_id, actor=actor, reason=reason)
            canceled.append(task_id)
        except DomainError:  # it ended or moved on meanwhile: the rest still go
            skipped.append(task_id)
    return {"canceled": canceled, "skipped": skipped}



EXTENDABLE_BUDGETS = ("max_steps", "max_model_calls", "max_tool_calls", "max_tokens",
                      "max_duration_s")
MAX_EXTENSION = 10**9


def budget_extension_checked(extend: Any, *, field: str = "extend") -> dict[str, Any]:
    """Check a budget extension: {budget: n} and optionally {"per_tool": {tool: n}},
    every n a non-negative integer."""
    if extend is None:
        return {}
    if not isinstance(extend, dict):
        raise invalid("invalid", "The request is not valid.",
                      **{field: ["an object {budget name: n}"]})
    problems: list[str] = []

    def amount(name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_EXTENSION:
            problems.append(f"{name}: a non-negative integer")
            return 0
        return value

    clean: dict[str, Any] = {}
    for key, value in extend.items():
        if key == "per_tool":
            if not isinstance(value, dict):
                problems.append("per_tool: an object {tool name: n}")
                continue
            clean["per_tool"] = {str(t): amount(f"per_tool.{t}", n) for t, n in value.items()}
        elif key in EXTENDABLE_BUDGETS:
            clean[key] = amount(key, value)
        elif key == "max_cost":  # dollars, kept as exact text (`tasks_app.pricing`)
            if problem := money_problem(value, maximum=MAX_BUDGET):
                problems.append(f"max_cost: {problem}")
            else:
                clean[key] = money_text(money(value) or Decimal(0))
        else:
            names = ", ".join(EXTENDABLE_BUDGETS)
            problems.append(f"{key}: not a budget; one of {names}, max_cost, per_tool")
    if problems:
        raise invalid("invalid", "The request is not valid.", **{field: problems})
    return clean


def budget_extension_merged(current: dict[str, Any], extend: dict[str, Any]) -> dict[str, Any]:
    """`extend` (checked) added to the extensions a task already has."""
    merged = dict(current)
    for k, v in extend.items():
        if k == "per_tool":
            tools = dict(merged.get("per_tool") or {})
            for tool, n in v.items():
                tools[tool] = tools.get(tool, 0) + n
            merged["per_tool"] = tools
        elif k == "max_cost":  # exact dollars as text (`tasks_app.pricing`)
            merged[k] = money_text((money(merged.get(k)) or Decimal(0)) + Decimal(v))
        else:
            merged[k] = merged.get(k, 0) + v
    return merged


def task_resume(*, task_id: int, actor: Actor, expected_version: int | None = None,
                extend: dict[str, Any] | None = None, comment: str = "") -> Transitioned:
    """Resume an escalated task, optionally extending its budget (recorded):
    `extend` = {budget name: n, "per_tool": {tool: n}}, added to earlier extensions."""
    extend = budget_extension_checked(extend)
    with transaction.atomic():
        task = Task.objects.get(pk=task_id)
        merged = budget_extension_merged(task.budget_extension or {}, extend)
        fields: dict[str, Any] = {"budget_extension": merged, "repeat_count": 0, "stale_steps": 0}
        if "max_duration_s" in extend and task.deadline_at:
            fields["deadline_at"] = F("deadline_at") + timedelta(seconds=extend["max_duration_s"])
        done = task_transition(
            task_id=task_id, event="resumed", actor=actor, expected_version=expected_version,
            payload={"extend": extend, "comment": comment}, fields=fields,
        )
        schedule_advance_on_commit(task_id)
    return done


def task_fail_by_operator(*, task_id: int, actor: Actor, expected_version: int | None = None,
                          reason: str = "") -> Transitioned:
    """An operator ends an escalated or waiting task as FAILED."""
    with transaction.atomic():
        done = task_transition(
            task_id=task_id, event="fatal_error", actor=actor, expected_version=expected_version,
            payload={"reason": "failed_by_operator", "comment": reason},
            fields={"failure_reason": "failed_by_operator", "failure_detail": {"comment": reason}},
        )
    return done


def get_task_for_tenant(*, tenant_id: int, task_id: int) -> Task:
    task = Task.objects.filter(tenant_id=tenant_id, pk=task_id).first()
    if task is None:
        raise not_found("Task")
    return task


ACTIVE_STATUSES = NON_TERMINAL
