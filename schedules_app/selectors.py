"""Reads of schedules and their runs, always scoped to a tenant by the caller."""
from __future__ import annotations

from django.db.models import QuerySet

from .models import Schedule, ScheduleRun


def schedules_of_tenant(tenant_id: int) -> QuerySet[Schedule]:
    return Schedule.objects.filter(tenant_id=tenant_id).order_by("name")


def schedule_of_tenant(tenant_id: int, name: str) -> Schedule | None:
    return schedules_of_tenant(tenant_id).filter(name=name).first()


def runs_of_schedule(schedule_id: int) -> QuerySet[ScheduleRun]:
    """Newest due time first."""
    return ScheduleRun.objects.filter(schedule_id=schedule_id).order_by("-due_at", "-id")
