"""Admission: CREATED tasks start, first come first served, while the global,
per-tenant and per-agent limits on RUNNING tasks allow.

Admission decisions are serialized (a PostgreSQL transaction-scoped advisory
lock; SQLite's IMMEDIATE transactions already serialize writers) so two
admitters cannot both take the last slot.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.db.models.fields.json import KT
from django.utils import timezone

from ..machine import TaskStatus
from ..models import Task
from .actors import SYSTEM
from .dispatch import schedule_advance_on_commit

ADMISSION_LOCK_KEY = 0x7E7E_0001


def admission_after_commit() -> None:
    """Run admission after the current transaction commits (now, outside one);
    once per transaction, however many tasks it submitted or ended."""
    if connection.in_atomic_block and any(
        entry[1] is admit_created_tasks for entry in connection.run_on_commit
    ):
        return
    transaction.on_commit(admit_created_tasks)


def admit_created_tasks(*, limit: int = 100) -> list[int]:
    """Start as many CREATED tasks as the limits allow; returns their ids."""
    from .transitions import task_transition

    if not Task.objects.filter(status=TaskStatus.CREATED).exists():
        return []
    cfg = settings.TETHER
    admitted: list[int] = []
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [ADMISSION_LOCK_KEY])
        # One read of what runs, by (tenant, agent): the total and both limits' counts.
        per_tenant: Counter[int] = Counter()
        per_agent: Counter[int] = Counter()
        for tenant_id, agent_id, n in (
            Task.objects.filter(status=TaskStatus.RUNNING)
            .values_list("tenant_id", "agent_id")
            .annotate(n=Count("id"))
            .values_list("tenant_id", "agent_id", "n")
        ):
            per_tenant[tenant_id] += n
            per_agent[agent_id] += n
        free = cfg["MAX_RUNNING_TASKS"] - sum(per_tenant.values())
        if free <= 0:
            return []
        wanted = min(free, limit)
        full = [t for t, n in per_tenant.items() if n >= cfg["MAX_RUNNING_PER_TENANT"]]
        # Only the two budget figures of each candidate's agent, not its whole snapshot.
        candidates = (
            Task.objects.filter(status=TaskStatus.CREATED)
            .exclude(tenant_id__in=full)
            .order_by("id")
            .annotate(
                agent_cap=KT("agent_snapshot__budget__max_concurrent_tasks"),
                duration=KT("agent_snapshot__budget__max_duration_s"),
            )
            .values_list("id", "tenant_id", "agent_id", "version", "agent_cap", "duration")[
                : max(limit, free) * 4
            ]
        )
        now = timezone.now()
        for task_id, tenant_id, agent_id, version, agent_cap, duration in candidates:
            if len(admitted) >= wanted:
                break
            if per_tenant[tenant_id] >= cfg["MAX_RUNNING_PER_TENANT"] or per_agent[agent_id] >= (
                _number(agent_cap) or 10**9
            ):
                continue  # FIFO within what may run; this tenant/agent waits for a slot
            seconds = _number(duration) or 3600
            task_transition(
                task_id=task_id,
                event="task_started",
                actor=SYSTEM,
                expected_version=version,
                fields={"started_at": now, "deadline_at": now + timedelta(seconds=seconds)},
            )
            per_tenant[tenant_id] += 1
            per_agent[agent_id] += 1
            admitted.append(task_id)
            schedule_advance_on_commit(task_id)
    return admitted


def _number(text: str | None) -> float:
    """A budget figure as `KT` reads it out of the JSON snapshot (text, or None)."""
    return float(text) if text else 0.0
