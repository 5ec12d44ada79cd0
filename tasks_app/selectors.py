"""Reads of tasks, steps, events and agents, always scoped to a tenant by the caller."""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from accounts_app.vault.references import model_secret_names

from .models import (
    AgentProfile,
    AgentReleaseEntry,
    AgentVersion,
    Event,
    Step,
    Task,
)
from .payloads import resolve_steps, resolve_task


def event_dict(event: Event) -> dict[str, Any]:
    return {
        "id": event.pk,
        "task_id": event.task_id,
        "type": event.type,
        "task_version": event.task_version,
        "actor": event.actor,
        "actor_role": event.actor_role,
        "payload": event.payload,
        "trace_id": event.trace_id,
        "created_at": event.created_at.isoformat() if event.created_at else None,
    }


def tasks_of_tenant(tenant_id: int) -> QuerySet[Task]:
    return Task.objects.filter(tenant_id=tenant_id).select_related("agent")


def task_of_tenant(tenant_id: int, task_id: int) -> Task | None:
    """The tenant's task, its payloads stored out of row read back (`payloads`)."""
    task = tasks_of_tenant(tenant_id).filter(pk=task_id).first()
    if task is not None:
        resolve_task(task)
    return task


def latest_task_id(tenant_id: int) -> int | None:
    """The tenant's latest task that spent on model calls (else its latest task)."""
    tasks = Task.objects.filter(tenant_id=tenant_id).order_by("-id")
    return (tasks.filter(cost_pico__gt=0).values_list("id", flat=True).first()
            or tasks.values_list("id", flat=True).first())


def tasks_matching(
    *,
    tenant_id: int,
    statuses: list[str] | None = None,
    agent: str | None = None,
    created_after: datetime | None = None,
    created_before: datetime | None = None,
    trace_id: str | None = None,
    requester_id: int | None = None,
    agent_version: int | None = None,
    subject: str | None = None,
    parent: int | None = None,
) -> QuerySet[Task]:
    """The tenant's tasks that match every filter given (the API list and bulk cancel)."""
    qs = tasks_of_tenant(tenant_id).select_related("requester")
    if statuses:
        qs = qs.filter(status__in=statuses)
    if agent:
        qs = qs.filter(agent__name=agent)
    if created_after:
        qs = qs.filter(created_at__gte=created_after)
    if created_before:
        qs = qs.filter(created_at__lt=created_before)
    if trace_id:
        qs = qs.filter(trace_id=trace_id)
    if requester_id is not None:
        qs = qs.filter(requester_id=requester_id)
    if agent_version is not None:
        qs = qs.filter(agent_version=agent_version)
    if subject:
        qs = qs.filter(subject=subject)
    if parent is not None:
        qs = qs.filter(parent_id=parent)
    return qs


def agents_of_tenant(tenant_id: int) -> QuerySet[AgentProfile]:
    return AgentProfile.objects.filter(tenant_id=tenant_id).order_by("name")


def agent_of_tenant(tenant_id: int, name: str) -> AgentProfile | None:
    return agents_of_tenant(tenant_id).filter(name=name).first()


def published_agent_at(tenant_name: str, name: str) -> AgentProfile | None:
    """The agent `name` of the tenant `tenant_name`, if an admin published it
    (what the open protocols, A2A and MCP, may show; the others are unknown there)."""
    return (AgentProfile.objects.select_related("tenant")
            .filter(tenant__name=tenant_name, name=name, published=True).first())


def agents_naming_secret(tenant_id: int, name: str) -> list[str]:
    """The tenant's agent profiles whose model (or fallback) keys are the secret."""
    return [a.name for a in AgentProfile.objects.filter(tenant_id=tenant_id)
            .only("name", "model").order_by("name")
            if name in model_secret_names(a.model).values()]


def agent_versions_of(agent_id: int) -> QuerySet[AgentVersion]:
    return AgentVersion.objects.filter(agent_id=agent_id).order_by("-number")


def agent_version_of(agent_id: int, number: int) -> AgentVersion | None:
    return AgentVersion.objects.filter(agent_id=agent_id, number=number).first()


def release_log_of(agent_id: int) -> QuerySet[AgentReleaseEntry]:
    return AgentReleaseEntry.objects.filter(agent_id=agent_id).order_by("-id")


def steps_of_task(task_id: int) -> QuerySet[Step]:
    return Step.objects.filter(task_id=task_id).order_by("step_no")


def steps_after(*, task_id: int, after_step_no: int = 0, limit: int = 100) -> list[Step]:
    """Steps of a task with step_no > after_step_no, in order (bounded page)."""
    steps = list(steps_of_task(task_id).filter(step_no__gt=after_step_no)[:limit])
    resolve_steps(task_id, steps)
    return steps


def events_after(*, task_id: int, after_id: int = 0, limit: int = 200) -> list[Event]:
    """Events of a task with id > after_id, in id order: a stable cursor that
    neither skips nor repeats events that commit while a client pages."""
    return list(Event.objects.filter(task_id=task_id, id__gt=after_id).order_by("id")[:limit])


def usage_of(task: Task) -> dict[str, Any]:
    return {
        "steps": task.steps_count,
        "model_calls": task.model_calls,
        "tool_calls": task.tool_calls,
        "tokens": task.tokens,
        "per_tool": task.per_tool,
    }
