"""Retrying a FAILED or CANCELED task from a step (operators).

`task_retry` creates a new task linked to the original (`retry_of`,
`retry_from_step`; the original lists it in `retried_by`) that:
- inherits the original's confirmed steps before `from_step`: their rows are
  copied (same decision, result and idempotency key, `inherited_from` set), so
  they are its history and its context and are never run again; their ledger
  entries are the original's, shared through the keys;
- belongs to the original's retry chain (`key_lineage`, see `lineage`), so a
  call the model proposes again is answered from the ledger;
- starts its counters from the inherited usage (steps, model calls, tokens,
  tool calls, per tool), so budgets count what the chain spent; `budget`
  extends them (as a resume does); a scripted task therefore continues with the
  script entries after the inherited steps (entry n answers model call n);
- runs with the original's agent snapshot and script.

Default `from_step`: the first step the task did not get past: not succeeded and
not an error the model was shown and went on from. An explicit `from_step` may
be earlier, never later; nor later than a step whose effect the original's
compensation undoes. Every retry is an attributed event on both tasks
(`retried` on the original, `retry_created` on the new one). Only FAILED and
CANCELED tasks are retried: anything else is a 409.
"""
from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from foundations.actors import Actor
from foundations.errors import DomainError, conflict, invalid, not_found

from ..machine import TaskStatus
from ..models import Event, Step, StepKind, StepStatus, Task
from ..payloads import resolve_task
from ..services.admission import admission_after_commit
from ..services.tasks import budget_extension_checked, budget_extension_merged
from ..store.creation import task_create
from ..store.events import event_append

RETRYABLE = (TaskStatus.FAILED, TaskStatus.CANCELED)
MAX_COMMENT = 2000


@dataclass(frozen=True)
class Retried:
    task: Task
    original_id: int
    from_step: int


def default_from_step(steps: list[Step]) -> int:
    """The first step the task did not get past (steps in order)."""
    for i, step in enumerate(steps):
        shown_and_passed = (step.status in (StepStatus.FAILED, StepStatus.REJECTED)
                            and step.kind in (StepKind.TOOL, StepKind.INVALID)
                            and i + 1 < len(steps))
        if step.status != StepStatus.SUCCEEDED and not shown_and_passed:
            return step.step_no
    return len(steps) + 1


def task_retry(*, tenant_id: int, task_id: int, actor: Actor, from_step: int | None = None,
               budget: dict[str, Any] | None = None, comment: str = "") -> Retried:
    """Create the retry of a FAILED or CANCELED task (see the module docstring)."""
    extend = budget_extension_checked(budget, field="budget")
    if len(comment) > MAX_COMMENT:
        raise invalid("invalid", "The request is not valid.",
                      comment=[f"at most {MAX_COMMENT} characters"])
    with transaction.atomic():
        # The row lock serialises retries of one task with its compensation
        # choosing what to undo (`runner.compensation.compensable_steps`).
        original = Task.objects.select_for_update().filter(tenant_id=tenant_id, pk=task_id).first()
        if original is None:
            raise not_found("Task")
        if original.status not in RETRYABLE:
            raise conflict("not_retryable",
                           f"only FAILED or CANCELED tasks are retried; this one is "
                           f"{original.status}", status=original.status)
        if original.shadow_of is not None:  # its retry would run for real
            raise conflict("not_retryable", "an evaluation run is not retried: start "
                           "another evaluation", status=original.status)
        steps = list(Step.objects.filter(task_id=original.pk).order_by("step_no"))
        last = min(default_from_step(steps), _first_compensated(original.pk))
        if from_step is None:
            from_step = last
        elif from_step < 1 or from_step > last:
            raise invalid("invalid", "The request is not valid.", from_step=[
                f"from 1 to {last}: step {last} is the first the task did not get past "
                "(or whose effect its compensation undoes)"])
        inherited = [s for s in steps if s.step_no < from_step]
        task = _create(original, inherited, extend=extend, from_step=from_step)
        payload = {"comment": comment, "from_step": from_step, "budget": extend}
        event_append(task_id=original.pk, tenant_id=tenant_id, trace_id=original.trace_id,
                     task_version=original.version, type="retried", actor=actor,
                     payload={**payload, "retry_task": task.pk})
        event_append(task_id=task.pk, tenant_id=tenant_id, trace_id=task.trace_id,
                     task_version=0, type="retry_created", actor=actor,
                     payload={**payload, "retry_of": {"task": original.pk, "step_no": from_step},
                              "inherited": {"steps": len(inherited),
                                            "tool_calls": task.tool_calls}})
        admission_after_commit()
    return Retried(task=task, original_id=original.pk, from_step=from_step)


def _first_compensated(task_id: int) -> int:
    """The first step the task's compensation undoes (a huge number when none)."""
    nos = [n for payload in Event.objects.filter(task_id=task_id, type="compensating")
           .values_list("payload", flat=True) for n in (payload or {}).get("step_nos", [])]
    return min(nos, default=10**9)


def _create(original: Task, inherited: list[Step], *, extend: dict[str, Any],
            from_step: int) -> Task:
    called = [s for s in inherited if s.kind == StepKind.TOOL and s.idempotency_key
              and s.status in (StepStatus.SUCCEEDED, StepStatus.FAILED)]
    per_tool: dict[str, int] = {}
    for step in called:
        per_tool[step.tool] = per_tool.get(step.tool, 0) + 1
    resolve_task(original)  # its input anew: stored out of row again, as one more use
    return task_create(
        actor=Actor(name="system", role="system"),
        agent_name=(original.agent_snapshot or {}).get("name", ""),
        inherited=inherited,
        tenant_id=original.tenant_id, requester_id=original.requester_id,
        api_key_id=original.api_key_id, agent_id=original.agent_id,
        agent_snapshot=original.agent_snapshot, agent_version=original.agent_version,
        goal=original.goal, input=original.input,
        subject=original.subject, script=original.script, trace_id=secrets.token_hex(16),
        retry_of=original, retry_from_step=from_step,
        key_lineage=original.key_lineage or original.pk,
        steps_count=len(inherited),
        # a step decided from an earlier step's reply cost no model call of its own
        model_calls=sum(1 for s in inherited if "from_reply_of_step" not in (s.model_log or {})),
        tokens=sum(int((s.model_log or {}).get("tokens") or 0) for s in inherited),
        tool_calls=len(called), per_tool=per_tool,
        budget_extension=budget_extension_merged(original.budget_extension or {}, extend),
    )


def not_yet_retried(tasks: QuerySet[Task]) -> QuerySet[Task]:
    """Of `tasks`, those a bulk retry takes: FAILED or CANCELED, and not retried
    before (retrying one twice is allowed one by one, never in bulk)."""
    return tasks.filter(status__in=RETRYABLE, retried_by__isnull=True)


def task_retry_many(*, tenant_id: int, task_ids: list[int], actor: Actor,
                    budget: dict[str, Any] | None = None,
                    comment: str = "") -> dict[str, Any]:
    """Bulk retry (each from its default step), each in its own transaction; a task
    that cannot be retried is skipped with its reason."""
    retried: list[dict[str, int]] = []
    skipped: list[dict[str, Any]] = []
    budget_extension_checked(budget, field="budget")  # a bad one refuses the call before any retry
    for task_id in task_ids:
        try:
            done = task_retry(tenant_id=tenant_id, task_id=task_id, actor=actor, budget=budget,
                              comment=comment)
            retried.append({"task": task_id, "retry": done.task.pk, "from_step": done.from_step})
        except DomainError as exc:
            skipped.append({"task": task_id, "code": exc.code})
    return {"retried": retried, "skipped": skipped}
