"""The store's backend interface, and its portable implementation: the ORM.

`Backend` is every statement of the store (and of admission, leases, the slice
memo's probe, the breakers and the registry) that a database may want written
its own way. Written here once with the ORM (or plain SQL both databases run),
it is what SQLite, the embedded mode's database, runs (`sqlite`), and what a
caller on PostgreSQL asks for when a commit's fields are expressions
(`writes.write(statement=False)`). `postgres` overrides the hot paths: one
prepared statement per commit, per lease, per admission read.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from django.db import connection, transaction
from django.db.models import BooleanField, Count, Expression, ExpressionWrapper, F, Min, Q
from django.db.models.fields.json import KT
from django.db.models.functions import Now

from tools_app.executor.ledger import recordable
from tools_app.models import Breaker, ToolExecution

from ...keys import idempotency_key
from ...machine import TaskStatus
from ...models import Step, Task
from ..effects import ends
from ..events import event_append
from ..hooks import OPEN_REQUESTS
from ..shapes import Commit, Committed
from ..spend import bill_rollup
from ..steps import close_open_steps, sources_of

# A breaker's columns its admission reads before every call to a downstream.
BREAKER_ADMISSION_COLUMNS = ("state", "failures", "open_until", "probe_owner", "probe_until")
# Admission reads its candidates in keyset pages of this many.
ADMISSION_PAGE = 20


class Candidate(NamedTuple):
    """A CREATED task admission may start (`services.admission`)."""

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


class AdmissionReads:
    """What admission reads, with the ORM."""

    def any_created(self) -> bool:
        return Task.objects.filter(status=TaskStatus.CREATED).exists()

    def lock(self) -> None:
        """Serialize admitters: nothing to take with the ORM alone (SQLite's
        IMMEDIATE transactions already serialize writers; PostgreSQL's backend
        takes an advisory lock)."""

    def running_counts(self) -> tuple[Counter[int], Counter[int], int]:
        """One read of what runs, by (tenant, agent, evaluation run or not): both
        limits' counts, and the evaluation runs'."""
        return running_counts(
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
                         "duration", "parent_id")[:ADMISSION_PAGE]
        )
        return [Candidate(*row) for row in rows]


def running_counts(rows: Iterable[tuple[int, int, bool, int]]
                   ) -> tuple[Counter[int], Counter[int], int]:
    per_tenant: Counter[int] = Counter()
    per_agent: Counter[int] = Counter()
    shadows = 0
    for tenant_id, agent_id, shadow, n in rows:
        per_tenant[tenant_id] += n
        per_agent[agent_id] += n
        shadows += n if shadow else 0
    return per_tenant, per_agent, shadows


class Backend:
    """The ORM's way, valid on any database."""

    admission: AdmissionReads = AdmissionReads()
    # Is this database used by one process alone (no other sweeper, no
    # deployment lock to take)?
    one_process = False
    # May the events table be partitioned by month (`store.partitions`)?
    partitions_events = False

    # --- commits ---------------------------------------------------------------------

    def commit(self, c: Commit, *, target: str, set_: dict[str, Any], payload: dict[str, Any],
               now: datetime, savepoint: bool) -> Committed | None:
        """Write `c`; None, writing nothing, when the task moved on."""
        return self.commit_orm(c, target=target, set_=set_, payload=payload, now=now)

    def commit_orm(self, c: Commit, *, target: str, set_: dict[str, Any],
                   payload: dict[str, Any], now: datetime) -> Committed | None:
        """`c` with the ORM, in one transaction (any database: a commit whose
        fields are expressions; what else it writes, closing open work, is
        still this backend's)."""
        t = c.task
        version = t.version + 1 if c.transition else t.version
        fields = {**set_, **{col: F(col) + n for col, n in c.add.items() if n}}
        if c.transition:
            fields.update(status=target, version=version)
        # The task's UPDATE comes first: refused, it wrote nothing, and nothing else is written.
        with transaction.atomic(savepoint=False):
            if Task.objects.filter(pk=t.id, version=t.version, status=t.status).update(
                    **fields) != 1:
                return None
            step = None
            if c.new_step is not None:
                step = Step(task_id=t.id, **c.new_step.fields)
                step.save(force_insert=True)
                if c.new_step.keyed is not None:
                    tool, args = c.new_step.keyed
                    step.idempotency_key = idempotency_key(task_id=t.id, step_id=step.pk,
                                                           tool=tool, args=args)
                    Step.objects.filter(pk=step.pk).update(idempotency_key=step.idempotency_key)
            if c.move is not None:
                Step.objects.filter(pk=c.move.step_id,
                                    status__in=sources_of(c.move.fields["status"])).update(
                    **c.move.fields)
            if c.claim is not None and step is not None:
                ToolExecution.objects.create(idempotency_key=step.idempotency_key,
                                             step_id=step.pk, **c.claim)
            recorded = c.record is not None and bool(
                recordable(c.record.key, c.record.owner).update(**c.record.fields))
            if c.payload_key and step is not None:
                payload = {**payload, "idempotency_key": step.idempotency_key}
            if c.transition and ends(target):
                assert c.event is not None  # a transition's event
                self.close_open_work(t.id, event=c.event, payload=c.payload, now=now)
            if c.bill is not None:
                bill_rollup(c.bill)
            if c.then is not None:
                c.then(step, version)
            event = None if c.event is None else event_append(
                task_id=t.id, tenant_id=t.tenant_id, trace_id=t.trace_id, task_version=version,
                type=c.event, actor=c.actor, payload=payload)
        return Committed(version=version, event_id=None if event is None else event.pk,
                         target=target, step=step, recorded=recorded)

    def close_open_work(self, task_id: int, *, event: str, payload: dict[str, Any],
                        now: datetime) -> None:
        """A task that ended leaves nothing open: its open steps end, its open
        human requests are canceled. In the transaction that ends it."""
        close_open_steps(task_id, event=event, payload=payload, now=now)
        for model, open_status, canceled_status in OPEN_REQUESTS:
            model.objects.filter(task_id=task_id, status=open_status).update(  # type: ignore[attr-defined]
                status=canceled_status)

    def usage_add(self, task_id: int, amounts: dict[str, int],
                  with_statement: tuple[str, dict[str, Any]] | None) -> None:
        """Add to the task's counters, and run `with_statement` in the same transaction."""
        with transaction.atomic():
            Task.objects.filter(pk=task_id).update(**{k: F(k) + v for k, v in amounts.items()})
            if with_statement is not None:
                with connection.cursor() as cursor:
                    cursor.execute(*with_statement)

    # --- leases ----------------------------------------------------------------------

    def lease_take(self, *, task_id: int, owner: str, now: datetime,
                   until: datetime) -> Task | None:
        taken = (
            Task.objects.filter(pk=task_id, status=TaskStatus.RUNNING)
            .filter(Q(lease_owner="") | Q(lease_expires_at__lt=now) | Q(lease_owner=owner))
            .update(lease_owner=owner, lease_expires_at=until, heartbeat_at=now,
                    next_run_at=None)
        )
        return Task.objects.filter(pk=task_id).first() if taken == 1 else None

    def lease_release(self, *, task_id: int, owner: str, next_run_at: datetime | None) -> None:
        Task.objects.filter(pk=task_id, lease_owner=owner).update(
            lease_owner="", lease_expires_at=None, next_run_at=next_run_at)

    def wall_clock(self) -> Expression:
        """The database's clock now, as an expression to write (the recovery
        sweep's `SweepRun` times)."""
        return Now()

    # --- reads -----------------------------------------------------------------------

    def fetch_one(self, sql: str, params: Any) -> tuple[Any, ...] | None:
        """The first row of `sql` (plain SQL both databases run; psycopg's placeholders)."""
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()

    def fetch_all(self, sql: str, params: Any) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def breaker_row(self, key: str) -> dict[str, Any] | None:
        """What a breaker's admission reads of its row (`BREAKER_ADMISSION_COLUMNS`)."""
        return Breaker.objects.filter(key=key).values(*BREAKER_ADMISSION_COLUMNS).first()
