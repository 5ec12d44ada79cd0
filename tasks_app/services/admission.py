"""Admission: CREATED tasks start while the global, per-tenant and per-agent
limits on RUNNING tasks allow; when several tenants wait, each free slot goes
to the waiting tenant with the smallest share of what runs, its RUNNING tasks
divided by its weight (weighted fair admission: with both saturated, tenants
of weights 3 and 1 hold slots 3 to 1, and so are admitted 3 to 1). Within a
tenant, first come first served. A tenant's running limit and weight are its
quota's (`services.quotas`), and a tenant whose spend limit is reached, when
its quota queues rather than refuses, starts nothing until the period ends.

Child tasks (a workflow's agent node, an agent called as a tool) go first and
past their tenant's and agent's limits: their parent holds a slot and waits.

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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.db.models import BooleanField, Count, ExpressionWrapper, Min, Q
from django.db.models.fields.json import KT
from django.utils import timezone

from ..machine import TaskStatus
from ..models import Task
from ..prepared import fetch_all_prepared, fetch_one_prepared
from ..store.commits import commit_start
from .dispatch import schedule_admission, schedule_advance_on_commit
from .quotas import admission_terms

ADMISSION_LOCK_KEY = 0x7E7E_0001


def admission_after_commit() -> None:
    """Run admission after the current transaction commits (now, outside one);
    once per transaction, however many tasks it submitted or ended."""
    _once_on_commit(admit_created_tasks)


def admission_after_submission() -> None:
    """After a submission commits: a worker is asked to run admission
    (`admit_handed_over`), at most one request at a time; the request does not
    run it, so it neither spends admission's statements nor queues behind
    another admitter's lock. Without a worker to ask (the embedded and the
    manual modes) or with the broker down, the request admits, as after any
    other commit."""
    _once_on_commit(_hand_over_or_admit)


def _once_on_commit(admit: Callable[[], object]) -> None:
    if connection.in_atomic_block and any(
        entry[1] in ADMISSION_HOOKS for entry in connection.run_on_commit
    ):
        return
    # robust: the submission or the end is committed whatever admission meets
    # (a busy database); the recovery sweep admits what is left CREATED.
    transaction.on_commit(admit, robust=True)


# One hand-over at a time: set by the request that asks a worker, cleared by
# the worker as it starts (before its admission reads the queue), so a
# submission committed after that read asks again. (Should the worker never
# clear it, it lapses; the recovery sweep admits what is left meanwhile.)
HAND_OVER_KEY = "tether:admission-handed-over"
HAND_OVER_TTL_S = 1


def _hand_over_or_admit() -> None:
    if not cache.add(HAND_OVER_KEY, 1, timeout=HAND_OVER_TTL_S):
        return  # a worker was asked and has not started: it will see this task
    if not schedule_admission():
        cache.delete(HAND_OVER_KEY)
        admit_created_tasks()


ADMISSION_HOOKS: tuple[Callable[..., object], ...] = ()  # set below, once both exist


def admit_handed_over() -> list[int]:
    """A worker's admission asked for by a submission (`admission_after_submission`)."""
    cache.delete(HAND_OVER_KEY)
    return admit_created_tasks()


# Candidates are read in keyset pages: the waiting children, then, for each
# tenant chosen, a page of its own queue. At most `limit * SCAN_FACTOR`
# candidates are looked at per call (tasks held back by their agent's limit
# are skipped one by one).
PAGE = 20
SCAN_FACTOR = 4


def admit_created_tasks(*, limit: int = 100) -> list[int]:
    """Start as many CREATED tasks as the limits allow; returns their ids."""
    db: _Statements = _SQL if connection.vendor == "postgresql" else _ORM
    if not db.any_created():
        return []
    with transaction.atomic():
        db.lock()
        per_tenant, per_agent, shadows = db.running_counts()
        free = settings.TETHER["MAX_RUNNING_TASKS"] - sum(per_tenant.values())
        round_ = _Round(db, per_tenant, per_agent, wanted=min(free, limit),
                        budget=limit * SCAN_FACTOR)
        if round_.wanted > 0:
            round_.children()
            round_.tenants()
            round_.evaluation_runs(room=settings.TETHER["EVALUATION_MAX_RUNNING"] - shadows)
    return round_.admitted


class _Round:
    """One admission pass, inside the lock."""

    def __init__(self, db: _Statements, per_tenant: Counter[int], per_agent: Counter[int], *,
                 wanted: int, budget: int) -> None:
        self.db, self.per_tenant, self.per_agent = db, per_tenant, per_agent
        self.wanted, self.budget = wanted, budget
        self.admitted: list[int] = []
        self.now = timezone.now()

    def more(self) -> bool:
        return len(self.admitted) < self.wanted and self.budget > 0

    def start(self, cand: Candidate) -> None:
        if self.db.start(cand, self.now):
            _dispatch(cand.id)
            self.per_tenant[cand.tenant_id] += 1
            self.per_agent[cand.agent_id] += 1
            self.admitted.append(cand.id)

    def children(self) -> None:
        after = 0
        while self.more():
            page = self.db.children(after=after)
            self.budget -= len(page)
            for cand in page:
                if not self.more():
                    return
                self.start(cand)
            if len(page) < PAGE:
                return
            after = page[-1].id

    def tenants(self) -> None:
        heads = self.db.waiting_tenants()  # {tenant: its oldest waiting task's id}
        terms = admission_terms(heads)
        queues = {t: _Queue(head) for t, head in heads.items()
                  if not terms[t].held and self.per_tenant[t] < terms[t].max_running}
        while queues and self.more():
            # the smallest weighted share of what runs; the longest waiting on a tie
            tenant = min(queues, key=lambda t: (self.per_tenant[t] / terms[t].weight,
                                                queues[t].head))
            queue = queues[tenant]
            cand = queue.next(self, tenant)
            if cand is None:
                del queues[tenant]
                continue
            if self.per_agent[cand.agent_id] >= (_number(cand.agent_cap) or 10**9):
                continue  # this agent waits for a slot; the tenant's next task may run
            self.start(cand)
            if self.per_tenant[tenant] >= terms[tenant].max_running:
                del queues[tenant]

    def evaluation_runs(self, *, room: int) -> None:
        """What room is left, to evaluation runs, in submission order, at most
        `room` of them; each within its tenant's and its agent's limits."""
        after, started = 0, len(self.admitted)
        while room > 0 and self.more():
            page = self.db.evaluation_page(after=after)
            self.budget -= len(page)
            for cand in page:
                if room <= 0 or not self.more():
                    return
                terms = admission_terms({cand.tenant_id: cand.id})[cand.tenant_id]
                if (terms.held or self.per_tenant[cand.tenant_id] >= terms.max_running
                        or self.per_agent[cand.agent_id] >= (_number(cand.agent_cap) or 10**9)):
                    continue
                self.start(cand)
                room -= len(self.admitted) - started
                started = len(self.admitted)
            if len(page) < PAGE:
                return
            after = page[-1].id


class _Queue:
    """A tenant's waiting tasks, read a page at a time as admission takes them."""

    def __init__(self, head: int) -> None:
        self.head = head
        self.page: list[Candidate] = []
        self.after = head - 1
        self.done = False

    def next(self, round_: _Round, tenant: int) -> Candidate | None:
        if not self.page and not self.done:
            self.page = round_.db.tenant_page(tenant, after=self.after)
            round_.budget -= len(self.page)
            self.done = len(self.page) < PAGE
        if not self.page:
            return None
        cand = self.page.pop(0)
        self.after = cand.id
        self.head = self.page[0].id if self.page else cand.id + 1
        return cand


ADMISSION_HOOKS = (admit_created_tasks, _hand_over_or_admit)


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

    def children(self, *, after: int) -> list[Candidate]:
        """The next page of waiting child tasks, in submission order."""
        return self._page(Task.objects.filter(parent__isnull=False, shadow_of__isnull=True), after)

    def waiting_tenants(self) -> dict[int, int]:
        """The tenants with top-level tasks waiting, each with its oldest one's id."""
        return dict(Task.objects.filter(status=TaskStatus.CREATED, parent__isnull=True,
                                        shadow_of__isnull=True)
                    .order_by().values("tenant_id").annotate(head=Min("id"))
                    .values_list("tenant_id", "head"))

    def tenant_page(self, tenant_id: int, *, after: int) -> list[Candidate]:
        """The next page of a tenant's waiting top-level tasks, in submission order."""
        return self._page(Task.objects.filter(tenant_id=tenant_id, parent__isnull=True,
                                              shadow_of__isnull=True), after)

    def evaluation_page(self, *, after: int) -> list[Candidate]:
        """The next page of waiting evaluation runs, in submission order."""
        return self._page(Task.objects.filter(shadow_of__isnull=False), after)

    def _page(self, tasks: Any, after: int) -> list[Candidate]:
        rows = (
            tasks.filter(status=TaskStatus.CREATED, id__gt=after)
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
_CANDIDATE = f"""
SELECT id, tenant_id, agent_id, version, trace_id,
       agent_snapshot -> 'budget' ->> 'max_concurrent_tasks',
       agent_snapshot -> 'budget' ->> 'max_duration_s', parent_id
  FROM {_TASKS}
 WHERE status = '{_CREATED}' AND id > %(after)s"""
CHILDREN_SQL = (f"{_CANDIDATE} AND parent_id IS NOT NULL AND shadow_of IS NULL"
                " ORDER BY id LIMIT %(page)s")
TENANT_PAGE_SQL = (f"{_CANDIDATE} AND tenant_id = %(tenant)s AND parent_id IS NULL"
                   " AND shadow_of IS NULL ORDER BY id LIMIT %(page)s")
EVALUATION_PAGE_SQL = f"{_CANDIDATE} AND shadow_of IS NOT NULL ORDER BY id LIMIT %(page)s"
# A skip scan of the waiting tasks' index (task_waiting_by_tenant): one probe
# per waiting tenant, however long its queue; then each one's oldest top-level task.
WAITING_TENANTS_SQL = f"""
WITH RECURSIVE waiting(tenant_id) AS (
    (SELECT tenant_id FROM {_TASKS} WHERE status = '{_CREATED}' ORDER BY tenant_id LIMIT 1)
  UNION ALL
    SELECT (SELECT t.tenant_id FROM {_TASKS} t
             WHERE t.status = '{_CREATED}' AND t.tenant_id > w.tenant_id
             ORDER BY t.tenant_id LIMIT 1)
      FROM waiting w WHERE w.tenant_id IS NOT NULL
)
SELECT w.tenant_id, h.id FROM waiting w CROSS JOIN LATERAL (
    SELECT t.id FROM {_TASKS} t
     WHERE t.status = '{_CREATED}' AND t.tenant_id = w.tenant_id AND t.parent_id IS NULL
       AND t.shadow_of IS NULL
     ORDER BY t.id LIMIT 1) h
 WHERE w.tenant_id IS NOT NULL
"""


class _PreparedStatements(_Statements):
    def any_created(self) -> bool:
        row = fetch_one_prepared(ANY_CREATED_SQL, ())
        return bool(row and row[0])

    def lock(self) -> None:
        fetch_one_prepared(LOCK_SQL, (ADMISSION_LOCK_KEY,))

    def running_counts(self) -> tuple[Counter[int], Counter[int], int]:
        return _counts(fetch_all_prepared(RUNNING_SQL, ()))

    def children(self, *, after: int) -> list[Candidate]:
        rows = fetch_all_prepared(CHILDREN_SQL, {"after": after, "page": PAGE})
        return [Candidate(*row) for row in rows]

    def waiting_tenants(self) -> dict[int, int]:
        return dict(fetch_all_prepared(WAITING_TENANTS_SQL, ()))

    def tenant_page(self, tenant_id: int, *, after: int) -> list[Candidate]:
        rows = fetch_all_prepared(
            TENANT_PAGE_SQL, {"after": after, "tenant": tenant_id, "page": PAGE})
        return [Candidate(*row) for row in rows]

    def evaluation_page(self, *, after: int) -> list[Candidate]:
        rows = fetch_all_prepared(EVALUATION_PAGE_SQL, {"after": after, "page": PAGE})
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
