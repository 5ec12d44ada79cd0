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
submits or ends a task, so on PostgreSQL its reads are prepared SQL; its reads
and its lock are the store's backend's (`store.backends`: `AdmissionReads`),
and each start is written by the store (`store.commits.commit_start`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

from ..store.backends import ADMISSION_PAGE, AdmissionReads, Candidate, backend
from ..store.commits import commit_start
from .dispatch import schedule_admission, schedule_advance_on_commit
from .quotas import admission_terms


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
SCAN_FACTOR = 4  # the page: `backends.ADMISSION_PAGE`


def admit_created_tasks(*, limit: int = 100) -> list[int]:
    """Start as many CREATED tasks as the limits allow; returns their ids."""
    db = backend().admission
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

    def __init__(self, db: AdmissionReads, per_tenant: Counter[int], per_agent: Counter[int], *,
                 wanted: int, budget: int) -> None:
        self.db, self.per_tenant, self.per_agent = db, per_tenant, per_agent
        self.wanted, self.budget = wanted, budget
        self.admitted: list[int] = []
        self.now = timezone.now()

    def more(self) -> bool:
        return len(self.admitted) < self.wanted and self.budget > 0

    def start(self, cand: Candidate) -> None:
        if candidate_start(cand, self.now):
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
            if len(page) < ADMISSION_PAGE:
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
            if len(page) < ADMISSION_PAGE:
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
            self.done = len(self.page) < ADMISSION_PAGE
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


def candidate_start(cand: Candidate, now: datetime) -> bool:
    """`task_started` from the row just read; False when the task moved on
    meanwhile (canceled while it waited: admission goes on with the next).
    The store writes it (`store.commits.commit_start`)."""
    return commit_start(task_id=cand.id, tenant_id=cand.tenant_id, trace_id=cand.trace_id,
                        version=cand.version, **_started(cand, now))


def _started(cand: Candidate, now: datetime) -> dict[str, Any]:
    return {"started_at": now,
            "deadline_at": now + timedelta(seconds=_number(cand.duration) or 3600)}


def _number(text: str | None) -> float:
    """A budget figure as `KT` reads it out of the JSON snapshot (text, or None)."""
    return float(text) if text else 0.0
