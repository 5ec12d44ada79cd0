"""Reads of workflows and runs."""
from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from tasks_app.models import Step, Task
from tasks_app.payloads import resolve

from .models import Workflow, WorkflowRun, WorkflowVersion

STEP_FIELDS = ("step_no", "kind", "status", "decision", "output", "error", "started_at",
               "finished_at")


def workflows_of(tenant_id: int) -> QuerySet[Workflow]:
    return Workflow.objects.filter(tenant_id=tenant_id)


def workflow_named(tenant_id: int, name: str) -> Workflow | None:
    return Workflow.objects.filter(tenant_id=tenant_id, name=name).first()


def published_workflow_at(tenant_name: str, name: str) -> Workflow | None:
    """The workflow `name` of the tenant `tenant_name`, if an admin published it
    (what the open protocols, A2A and MCP, may show)."""
    return (Workflow.objects.select_related("tenant")
            .filter(tenant__name=tenant_name, name=name, published=True).first())


def current_version_of(workflow: Workflow) -> WorkflowVersion | None:
    return WorkflowVersion.objects.filter(workflow=workflow,
                                          number=workflow.current_version).first()


def versions_of(workflow: Workflow) -> QuerySet[WorkflowVersion]:
    return WorkflowVersion.objects.filter(workflow=workflow).order_by("-number")


def run_steps(task_id: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's input and its steps, oldest first: what the orchestrator decides from."""
    run = {"input": Task.objects.filter(pk=task_id).values_list("input", flat=True).get()}
    rows = list(Step.objects.filter(task_id=task_id).order_by("step_no").values(*STEP_FIELDS))
    resolve(task_id, [run, *rows], ("input", "output"))  # payloads stored out of row
    return dict(run["input"] or {}), rows


def run_children(task_id: int) -> dict[int, int]:
    """A run's child tasks (its agent nodes'), by the step that started each."""
    return {step_no: pk for step_no, pk in Task.objects.filter(parent_id=task_id).values_list(
        "parent_step_no", "pk") if step_no is not None}


def run_of(task: Task) -> WorkflowRun | None:
    return WorkflowRun.objects.filter(task_id=task.pk).select_related("workflow").first()
