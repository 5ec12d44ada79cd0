"""Reads for the console's workflow pages, scoped by tenant."""
from __future__ import annotations

from datetime import timedelta

import yaml
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from tasks_app.models import Task

from ..models import Workflow, WorkflowRun, WorkflowVersion

RECENT_RUNS = 20


def workflow_rows(tenant_id: int) -> QuerySet[Workflow]:
    """The tenant's workflows with `latest_version` and `runs_last_day`."""
    since = timezone.now() - timedelta(days=1)
    latest = (WorkflowVersion.objects.filter(workflow=OuterRef("pk")).order_by("-number")
              .values("number")[:1])
    runs = (WorkflowRun.objects.filter(workflow=OuterRef("pk"), task__created_at__gte=since)
            .order_by().values("workflow").annotate(n=Count("task")).values("n"))
    return (Workflow.objects.filter(tenant_id=tenant_id)
            .annotate(latest_version=Subquery(latest),
                      runs_last_day=Coalesce(Subquery(runs), 0))
            .order_by("name"))


def workflow_of_tenant(tenant_id: int, name: str) -> Workflow | None:
    return workflow_rows(tenant_id).filter(name=name).first()


def versions_shown(workflow: Workflow, limit: int) -> list[WorkflowVersion]:
    return list(WorkflowVersion.objects.filter(workflow=workflow).order_by("-number")[:limit])


def version_numbers(workflow: Workflow) -> list[int]:
    return list(WorkflowVersion.objects.filter(workflow=workflow).order_by("-number")
                .values_list("number", flat=True))


def version_of(workflow: Workflow, number: int) -> WorkflowVersion | None:
    return WorkflowVersion.objects.filter(workflow=workflow, number=number).first()


def recent_runs(workflow: Workflow, limit: int = RECENT_RUNS) -> list[Task]:
    return list(Task.objects.filter(tenant_id=workflow.tenant_id, workflow_run__workflow=workflow)
                .select_related("requester").order_by("-id")[:limit])


def definition_text(version: WorkflowVersion | None) -> str:
    """The definition as YAML: the text it was registered as, else the parsed
    object written out in its own key order."""
    if version is None:
        return ""
    if version.source.strip():
        return version.source
    return yaml.safe_dump(version.definition, sort_keys=False, allow_unicode=True,
                          default_flow_style=False, width=100)

