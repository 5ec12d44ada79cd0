"""What workflows_app plugs into the runtime, from `AppConfig.ready`: the
orchestrator as an instant decision backend, the compensation of nodes that
declare their own `compensate` call, and workflows as a schedule's target."""
from __future__ import annotations

from typing import Any

from foundations.expressions import ExpressionError, render
from schedules_app.starters import ScheduledStart, register_target_kind
from tasks_app.gateway import register_backend
from tasks_app.models import Step, Task
from tasks_app.payloads import resolve_steps, resolve_task
from tasks_app.runner.compensation import register_compensation_planner

from .orchestrator import BACKEND, WorkflowBackend
from .selectors import run_steps, workflow_named
from .services.runs import submit_run


def register() -> None:
    register_backend(BACKEND, lambda model: WorkflowBackend(model, run_steps), instant=True)
    register_compensation_planner(node_compensation)
    register_target_kind("workflow", _scheduled_run,
                         exists=lambda tenant_id, name: workflow_named(tenant_id, name) is not None)


def _scheduled_run(start: ScheduledStart) -> Any:
    return submit_run(tenant_id=start.tenant_id, requester_id=start.requester_id,
                      workflow=start.name, input=start.input, actor=start.actor,
                      idempotency_key=start.idempotency_key)


def node_compensation(task: Task, step: Step) -> tuple[str, dict[str, Any]] | None:
    """A workflow node's `compensate` call for one of its steps: its arguments
    rendered with the run's `inputs`, the step's `output`, and in a map the
    step's `item` and `index`."""
    tag = (step.decision or {}).get("workflow") or {}
    compensate = tag.get("compensate")
    if not compensate:
        return None
    resolve_task(task)
    resolve_steps(task.pk, [step])
    activation = {"inputs": dict(task.input or {}), "output": step.output, "nodes": {},
                  "item": tag.get("item_value"), "index": tag.get("item")}
    try:
        args = render(compensate.get("args") or {}, activation)
    except ExpressionError as exc:
        raise ValueError(f"the compensation's arguments: {exc}") from exc
    if not isinstance(args, dict):
        raise ValueError("the compensation's arguments must be an object")
    return str(compensate["tool"]), args
