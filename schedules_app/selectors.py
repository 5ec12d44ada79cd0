"""Reads of schedules and their runs, always scoped to a tenant by the caller."""
from __future__ import annotations

from django.db.models import OuterRef, QuerySet, Subquery

from .models import Schedule, ScheduleRun


def schedules_of_tenant(tenant_id: int) -> QuerySet[Schedule]:
    return Schedule.objects.filter(tenant_id=tenant_id).order_by("name")


def schedule_of_tenant(tenant_id: int, name: str) -> Schedule | None:
    return schedules_of_tenant(tenant_id).filter(name=name).first()


def runs_of_schedule(schedule_id: int) -> QuerySet[ScheduleRun]:
    """Newest due time first."""
    return ScheduleRun.objects.filter(schedule_id=schedule_id).order_by("-due_at", "-id")


def schedules_with_last_run(tenant_id: int) -> list[tuple[Schedule, ScheduleRun | None]]:
    """The tenant's schedules, each with its latest run (None before the first)."""
    latest = (ScheduleRun.objects.filter(schedule_id=OuterRef("pk"))
              .order_by("-due_at", "-id").values("pk")[:1])
    schedules = list(schedules_of_tenant(tenant_id).annotate(last_run_id=Subquery(latest)))
    runs = ScheduleRun.objects.select_related("task").in_bulk(
        [s.last_run_id for s in schedules if s.last_run_id is not None])  # type: ignore[attr-defined]
    return [(s, runs.get(s.last_run_id)) for s in schedules]  # type: ignore[attr-defined]
