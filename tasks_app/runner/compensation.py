"""Compensation: when a task fails for good, undo what its writes did.

For every step that wrote successfully (newest first) whose tool names a
`compensation_tool`, that tool is called once with the original call:
``{"original_args", "original_result", "original_key"}``. The call goes
through the idempotency ledger under a key derived from the original one, so
running compensation again (a redelivered message, a second worker) never
compensates twice. Each outcome is an event on the task's timeline
(`compensation_succeeded` / `compensation_failed`); a failed compensation is
left for a person, it is not retried blindly.

Runs after the FAILED transition commits, outside any transaction.
"""

from __future__ import annotations

import logging

from tools_app.executor import OutcomeKind, ToolCall, ToolContext, execute_through_ledger
from tools_app.registry import tool_specs

from ..keys import sha256_hex
from ..machine import TaskStatus
from ..models import Step, StepKind, StepStatus, Task
from ..services.actors import SYSTEM
from ..services.events import event_append

log = logging.getLogger(__name__)


def compensation_key(original_key: str) -> str:
    return sha256_hex(f"compensate|{original_key}")


def compensate_task(task_id: int) -> int:
    """Compensate a FAILED task's successful writes; returns how many calls were made."""
    task = Task.objects.filter(pk=task_id).only("id", "tenant_id", "trace_id", "status").first()
    if task is None or task.status != TaskStatus.FAILED:
        return 0
    steps = list(
        Step.objects.filter(task_id=task_id, kind=StepKind.TOOL, status=StepStatus.SUCCEEDED)
        .exclude(tool="")
        .order_by("-step_no")
    )
    specs = tool_specs(tenant_id=task.tenant_id)
    made = 0
    for step in steps:
        spec = specs.get(step.tool)
        if spec is None or not spec.compensation_tool or spec.side_effect == "read":
            continue
        payload = {
            "step_no": step.step_no,
            "tool": step.tool,
            "compensation_tool": spec.compensation_tool,
        }
        compensator = specs.get(spec.compensation_tool)
        if compensator is None:
            _event(
                task,
                "compensation_failed",
                {**payload, "error": "the compensation tool is missing or disabled"},
            )
            continue
        call = ToolCall(
            spec=compensator,
            args={
                "original_args": step.args,
                "original_result": step.output,
                "original_key": step.idempotency_key,
            },
            context=ToolContext(
                idempotency_key=compensation_key(step.idempotency_key),
                task_id=task.pk,
                step_id=step.pk,
                tenant_id=task.tenant_id,
                trace_id=task.trace_id,
            ),
        )
        outcome = execute_through_ledger(call, owner=f"compensation:{task.pk}")
        if outcome.from_ledger:
            continue  # compensated before (or being compensated): nothing new to record
        made += 1
        if outcome.kind is OutcomeKind.OK:
            _event(task, "compensation_succeeded", {**payload, "result": outcome.result})
        else:
            _event(
                task,
                "compensation_failed",
                {**payload, "outcome": outcome.kind.value, "error": outcome.error},
            )
    return made


def _event(task: Task, type: str, payload: dict) -> None:  # type: ignore[type-arg]
    version = Task.objects.filter(pk=task.pk).values_list("version", flat=True).get()
    event_append(
        task_id=task.pk,
        tenant_id=task.tenant_id,
        trace_id=task.trace_id,
        task_version=version,
        type=type,
        actor=SYSTEM,
        payload=payload,
    )
