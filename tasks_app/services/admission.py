"""Admission: CREATED tasks start, first come first served, while the global,
per-tenant and per-agent limits on RUNNING tasks allow.

Admission decisions are serialized (a PostgreSQL transaction-scoped advisory
lock; SQLite's IMMEDIATE transactions already serialize writers) so two
admitters cannot both take the last slot.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count
from django.db.models.fields.json import KT
from django.utils import timezone

from config.errors import DomainError, ErrorKind

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


# Candidates are read in keyset pages, each leaving out the tenants that are
# full by then: a slot freed in a tenant with a long queue reads a page, not
# the queue. At most `limit * SCAN_FACTOR` candidates are looked at per call
# (tasks held back by their agent's limit are skipped one by one).
PAGE = 20
SCAN_FACTOR = 4


def admit_created_tasks(*, limit: int = 100) -> list[int]:
    """Start as many CREATED tasks as the limits allow; returns their ids."""
    if not Task.objects.filter(status=TaskStatus.CREATED).exists():
        return []
    cfg = settings.TETHER
    admitted: list[int] = []
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", [ADMISSION_LOCK_KEY])
        per_tenant, per_agent = _running_counts()
        free = cfg["MAX_RUNNING_TASKS"] - sum(per_tenant.values())
        wanted = min(free, limit)
        after, scanned = 0, 0
        now = timezone.now()
        while len(admitted) < wanted and scanned < limit * SCAN_FACTOR:
            full = [t for t, n in per_tenant.items() if n >= cfg["MAX_RUNNING_PER_TENANT"]]
            page = _candidates(after=after, excluding_tenants=full)
            for cand in page:
                if len(admitted) >= wanted:
                    break
                if per_tenant[cand.tenant_id] >= cfg["MAX_RUNNING_PER_TENANT"] or (
                    per_agent[cand.agent_id] >= (_number(cand.agent_cap) or 10**9)
                ):
                    continue  # FIFO within what may run; this tenant/agent waits for a slot
                if _start(cand, now):
                    per_tenant[cand.tenant_id] += 1
                    per_agent[cand.agent_id] += 1
                    admitted.append(cand.id)
            scanned += len(page)
            if len(page) < PAGE:
                break
            after = page[-1].id
    return admitted


class _Candidate(NamedTuple):
    id: int
    tenant_id: int
    agent_id: int
    version: int
    trace_id: str
    agent_cap: str | None
    duration: str | None


def _running_counts() -> tuple[Counter[int], Counter[int]]:
    """One read of what runs, by (tenant, agent): both limits' counts."""
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
    return per_tenant, per_agent


def _candidates(*, after: int, excluding_tenants: list[int]) -> list[_Candidate]:
    """The next page of CREATED tasks in submission order, with only the two
    budget figures of each one's agent, not its whole snapshot."""
    rows = (
        Task.objects.filter(status=TaskStatus.CREATED, id__gt=after)
        .exclude(tenant_id__in=excluding_tenants)
        .order_by("id")
        .annotate(
            agent_cap=KT("agent_snapshot__budget__max_concurrent_tasks"),
            duration=KT("agent_snapshot__budget__max_duration_s"),
        )
        .values_list("id", "tenant_id", "agent_id", "version", "trace_id", "agent_cap",
                     "duration")[:PAGE]
    )
    return [_Candidate(*row) for row in rows]


def _start(cand: _Candidate, now: datetime) -> bool:
    """`task_started` from the row just read; False when the task moved on
    meanwhile (canceled while it waited: admission goes on with the next)."""
    from .transitions import KnownTask, task_transition

    try:
        # A savepoint: a refusal must not doom the admission's transaction.
        with transaction.atomic():
            task_transition(
                task_id=cand.id,
                event="task_started",
                actor=SYSTEM,
                expected_version=cand.version,
                known=KnownTask(status=TaskStatus.CREATED, tenant_id=cand.tenant_id,
                                trace_id=cand.trace_id),
                fields={"started_at": now,
                        "deadline_at": now + timedelta(seconds=_number(cand.duration) or 3600)},
            )
    except DomainError as exc:
        if exc.kind != ErrorKind.CONFLICT:
            raise
        return False
    schedule_advance_on_commit(cand.id)
    return True


def _number(text: str | None) -> float:
    """A budget figure as `KT` reads it out of the JSON snapshot (text, or None)."""
    return float(text) if text else 0.0
