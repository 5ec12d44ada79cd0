"""Admission: CREATED tasks start, first come first served, while the global,
per-tenant and per-agent limits on RUNNING tasks allow.

Evaluation runs (shadow tasks, `Task.shadow_of`) have the lower priority: they
start only after every live task that may start now, in what room is left, and
never more than `TETHER_EVALUATION_MAX_RUNNING` of them run at once, so an
evaluation of a thousand tasks neither delays live tasks waiting now nor fills
the slots live tasks submitted meanwhile will need.

Admission decisions are serialized (a PostgreSQL transaction-scoped advisory
lock; SQLite's IMMEDIATE transactions already serialize writers) so two
admitters cannot both take the last slot. It runs after every transaction that
submits or ends a task, so on PostgreSQL its reads are prepared SQL; each start
is written by the store (`store.commits.commit_start`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connection, transaction
from django.db.models import BooleanField, Count, ExpressionWrapper, Q
from django.db.models.fields.json import KT
from django.utils import timezone

from ..machine import TaskStatus
from ..models import Task
from ..prepared import fetch_all_prepared, fetch_one_prepared
from ..store.commits import commit_start
from .dispatch import schedule_advance_on_commit

ADMISSION_LOCK_KEY = 0x7E7E_0001


def admission_after_commit() -> None:
    """Run admission after the current transaction commits (now, outside one);
    once per transaction, however many tasks it submitted or ended."""
    if connection.in_atomic_block and any(
        entry[1] is admit_created_tasks for entry in connection.run_on_commit
    ):
        return
    # robust: the submission or the end is committed whatever admission meets
    # (a busy database); the recovery sweep admits what is left CREATED.
    transaction.on_commit(admit_created_tasks, robust=True)


# Candidates are read in keyset pages, each leaving out the tenants that are
# full by then: a slot freed in a tenant with a long queue reads a page, not
# the queue. At most `limit * SCAN_FACTOR` candidates are looked at per call
# (tasks held back by their agent's limit are skipped one by one).
PAGE = 20
SCAN_FACTOR = 4


def admit_created_tasks(*, limit: int = 100) -> list[int]:
    """Start as many CREATED tasks as the limits allow; returns their ids."""
    db: _Statements = _SQL if connection.vendor == "postgresql" else _ORM
    if not db.any_created():
        return []
    cfg = settings.TETHER
    admitted: list[int] = []
    with transaction.atomic():
        db.lock()
        per_tenant, per_agent, shadows = db.running_counts()
        free = cfg["MAX_RUNNING_TASKS"] - sum(per_tenant.values())
        wanted = min(free, limit)
        now = timezone.now()
        passes = _Pass(db, per_tenant, per_agent, now, budget=limit * SCAN_FACTOR)
        passes.admit(admitted, wanted, shadow=False)
        room = cfg["EVALUATION_MAX_RUNNING"] - shadows  # evaluation runs: what is left
        if room > 0 and len(admitted) < wanted:
            passes.admit(admitted, min(wanted, len(admitted) + room), shadow=True)
    return admitted


class _Pass:
    """Admission's walks over the CREATED tasks (live ones, then evaluation runs),
    sharing the running counts and the number of candidates one call may read."""

    def __init__(self, db: _Statements, per_tenant: Counter[int], per_agent: Counter[int],
                 now: datetime, *, budget: int) -> None:
        self.db, self.per_tenant, self.per_agent, self.now = db, per_tenant, per_agent, now
        self.budget = budget

    def admit(self, admitted: list[int], wanted: int, *, shadow: bool) -> None:
        cap = settings.TETHER["MAX_RUNNING_PER_TENANT"]
        after = 0
        while len(admitted) < wanted and self.budget > 0:
            full = [t for t, n in self.per_tenant.items() if n >= cap]
            page = self.db.candidates(after=after, excluding_tenants=full, shadow=shadow)
            for cand in page:
                if len(admitted) >= wanted:
                    break
                if cand.parent_id is None and (
                    self.per_tenant[cand.tenant_id] >= cap
                    or self.per_agent[cand.agent_id] >= (_number(cand.agent_cap) or 10**9)
                ):
                    continue  # FIFO within what may run; this tenant/agent waits for a slot
                if self.db.start(cand, self.now):
                    _dispatch(cand.id)
                    self.per_tenant[cand.tenant_id] += 1
                    self.per_agent[cand.agent_id] += 1
                    admitted.append(cand.id)
            self.budget -= len(page)
            if len(page) < PAGE:
                break
            after = page[-1].id


# While a runner holds a hand-off slot open (`handing_off_one`), the first task
# admission starts goes to that runner instead of through the queue.
_hand_off: ContextVar[list[int] | None] = ContextVar("tether_admission_hand_off", default=None)


@contextmanager
def handing_off_one() -> Iterator[list[int]]:
    """Within this block, the first task that admission starts in this thread
    is not scheduled: its id is put in the yielded list, and the caller must
    advance it (or schedule it) once admission has committed. A Celery worker
    whose task ended, freeing a slot, goes on with the task that takes it
    and saves a round trip through the broker. Should the caller die first,
    the recovery sweep re-enqueues the unleased task."""
    slot: list[int] = []
    token = _hand_off.set(slot)
    try:
        yield slot
    finally:
        _hand_off.reset(token)


def _dispatch(task_id: int) -> None:
    slot = _hand_off.get()
    if slot is not None and not slot:
        slot.append(task_id)
    else:
        schedule_advance_on_commit(task_id)


class Candidate(NamedTuple):
    id: int
    tenant_id: int
    agent_id: int
    version: int
    trace_id: str
    agent_cap: str | None  # the two budget figures of its agent, as text out of the JSON
    duration: str | None
    # A child task (a workflow's agent node, an agent called as a tool) is started
    # whatever its tenant's and agent's limits: its parent holds a slot and waits
    # for it, so holding the child back until a slot frees could wait forever.
    # The global limit still holds.
    parent_id: int | None = None


class _Statements:
    """What admission reads and writes. Two implementations: the ORM (any
    database; SQLite in the embedded mode) and prepared SQL on PostgreSQL,
    where admission runs once for every task that ends."""

    def any_created(self) -> bool:
        return Task.objects.filter(status=TaskStatus.CREATED).exists()

    def lock(self) -> None:
        """Serialize admitters (SQLite's IMMEDIATE transactions already do)."""

    def running_counts(self) -> tuple[Counter[int], Counter[int], int]:
        """One read of what runs, by (tenant, agent, evaluation run or not): both
        limits' counts, and the evaluation runs'."""
        return _counts(
            Task.objects.filter(status=TaskStatus.RUNNING)
            .annotate(shadow=ExpressionWrapper(Q(shadow_of__isnull=False),
                                               output_field=BooleanField()))
            .values_list("tenant_id", "agent_id", "shadow")
            .annotate(n=Count("id"))
            .values_list("tenant_id", "agent_id", "shadow", "n")
        )

    def candidates(self, *, after: int, excluding_tenants: list[int],
                   shadow: bool = False) -> list[Candidate]:
        """The next page of CREATED tasks in submission order: live tasks, or
        evaluation runs (`shadow`)."""
        rows = (
            Task.objects.filter(status=TaskStatus.CREATED, id__gt=after,
                                shadow_of__isnull=not shadow)
            .exclude(tenant_id__in=excluding_tenants, parent__isnull=True)
            .order_by("id")
            .annotate(
                agent_cap=KT("agent_snapshot__budget__max_concurrent_tasks"),
                duration=KT("agent_snapshot__budget__max_duration_s"),
            )
            .values_list("id", "tenant_id", "agent_id", "version", "trace_id", "agent_cap",
                         "duration", "parent_id")[:PAGE]
        )
        return [Candidate(*row) for row in rows]

    def start(self, cand: Candidate, now: datetime) -> bool:
        """`task_started` from the row just read; False when the task moved on
        meanwhile (canceled while it waited: admission goes on with the next).
        The store writes it: one statement on PostgreSQL, the ORM elsewhere."""
        return commit_start(task_id=cand.id, tenant_id=cand.tenant_id, trace_id=cand.trace_id,
                            version=cand.version, **_started(cand, now))


_TASKS, _CREATED, _RUNNING = Task._meta.db_table, TaskStatus.CREATED.value, TaskStatus.RUNNING.value
ANY_CREATED_SQL = f"SELECT EXISTS (SELECT 1 FROM {_TASKS} WHERE status = '{_CREATED}')"
LOCK_SQL = "SELECT pg_advisory_xact_lock(%s)"
RUNNING_SQL = f"""
SELECT tenant_id, agent_id, shadow_of IS NOT NULL, count(*) FROM {_TASKS}
 WHERE status = '{_RUNNING}' GROUP BY 1, 2, 3
"""
CANDIDATES_SQL = f"""
SELECT id, tenant_id, agent_id, version, trace_id,
       agent_snapshot -> 'budget' ->> 'max_concurrent_tasks',
       agent_snapshot -> 'budget' ->> 'max_duration_s', parent_id
  FROM {_TASKS}
 WHERE status = '{_CREATED}' AND id > %(after)s
   AND (NOT (tenant_id = ANY(%(full)s)) OR parent_id IS NOT NULL)
   AND (shadow_of IS NOT NULL) = %(shadow)s
 ORDER BY id LIMIT %(page)s
"""


class _PreparedStatements(_Statements):
    def any_created(self) -> bool:
        row = fetch_one_prepared(ANY_CREATED_SQL, ())
        return bool(row and row[0])

    def lock(self) -> None:
        fetch_one_prepared(LOCK_SQL, (ADMISSION_LOCK_KEY,))

    def running_counts(self) -> tuple[Counter[int], Counter[int], int]:
        return _counts(fetch_all_prepared(RUNNING_SQL, ()))

    def candidates(self, *, after: int, excluding_tenants: list[int],
                   shadow: bool = False) -> list[Candidate]:
        rows = fetch_all_prepared(CANDIDATES_SQL, {
            "after": after, "full": excluding_tenants, "page": PAGE, "shadow": shadow})
        return [Candidate(*row) for row in rows]


_ORM = _Statements()
_SQL = _PreparedStatements()


def _counts(rows: Iterable[tuple[int, int, bool, int]]
            ) -> tuple[Counter[int], Counter[int], int]:
    per_tenant: Counter[int] = Counter()
    per_agent: Counter[int] = Counter()
    shadows = 0
    for tenant_id, agent_id, shadow, n in rows:
        per_tenant[tenant_id] += n
        per_agent[agent_id] += n
        shadows += n if shadow else 0
    return per_tenant, per_agent, shadows


def _started(cand: Candidate, now: datetime) -> dict[str, Any]:
    return {"started_at": now,
            "deadline_at": now + timedelta(seconds=_number(cand.duration) or 3600)}


def _number(text: str | None) -> float:
    """A budget figure as `KT` reads it out of the JSON snapshot (text, or None)."""
    return float(text) if text else 0.0
