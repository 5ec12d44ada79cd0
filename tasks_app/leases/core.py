"""Taking, waiting for and releasing a resource lease.

Invariants:
- one `ResourceLease` row per (tenant, resource); a holder is one call (its
  ledger key, task, step); the row lock is held only for the instant of
  taking or releasing, never across the call;
- each acquisition takes the next `fencing_token` of the resource (monotonic:
  rows are never deleted); the tool is told ``resource#token``
  (`ToolContext.fence`, the `X-Tether-Fence` header), and a release only
  frees the lease it took (same key, same token);
- a lease expires with its call: timeout + `LEDGER_CLAIM_GRACE_S` (+ 1 s)
  after it was taken, just after the call's ledger claim. Past that its holder is presumed
  dead: the next caller takes the lease over, and first settles the dead call
  through the ledger (`takeover`);
- a call that finds the resource held holds no worker: its task is scheduled
  again (LATER) and registered as a waiter; a release wakes the waiters at
  once, and a waiter also comes back by itself no later than the lease's
  expiry (bounded by `LEASE_WAIT_RECHECK_S`), so a lost wake-up costs time only;
- the lease is released after the call's outcome commits, when it fails, or
  when its result is discarded (the task was canceled meanwhile). A call in
  flight when its task is canceled keeps the lease until it returns: the call
  cannot be interrupted, and freeing the resource earlier would let a second
  call overlap it. Waiters of a task that ended are dropped at the next release.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import TracebackType

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from foundations.actors import Actor
from tools_app.executor.ledger import claim_s
from tools_app.executor.types import ToolCall, ToolSpec
from tools_app.resources import render_resource

from ..machine import TaskStatus
from ..models import LeaseWaiter, ResourceLease, Task
from ..services.dispatch import schedule_advance
from ..store.events import event_note
from .takeover import Holder, settle_dead_holder


@dataclass
class ResourceHold:
    """What `lease_for_call` decided: nothing to hold (`resource` empty), held
    (`token`), or `waiting` (come back after `delay_s`). A context manager: the
    lease is released on exit."""

    resource: str = ""
    token: int = 0
    waiting: bool = False
    delay_s: float = 0.0
    note: str = ""
    tenant_id: int = 0
    task_id: int = 0
    step_no: int = 0
    key: str = ""
    actor: Actor = field(default_factory=lambda: Actor(name="system", role="system"))

    @property
    def held(self) -> bool:
        return bool(self.resource) and not self.waiting

    def fenced(self, call: ToolCall) -> ToolCall:
        """The call, told which lease it runs under."""
        if not self.held:
            return call
        return replace(call, context=replace(call.context, fence=f"{self.resource}#{self.token}"))

    def __enter__(self) -> ResourceHold:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.held:
            lease_release(self)


def lease_for_call(*, spec: ToolSpec, call: ToolCall, step_no: int, owner: str,
                   actor: Actor) -> ResourceHold:
    """Take the lease of the resource `call` touches, or say how long to wait."""
    resource = render_resource(spec.resource, call.args)
    if not resource:
        return ResourceHold()
    ctx = call.context
    now = timezone.now()
    dead: Holder | None = None
    with transaction.atomic():
        ResourceLease.objects.bulk_create(
            [ResourceLease(tenant_id=ctx.tenant_id, resource=resource)], ignore_conflicts=True)
        # Locked for this read-decide-write instant only.
        row = ResourceLease.objects.select_for_update().get(tenant_id=ctx.tenant_id,
                                                            resource=resource)
        mine = row.holder_key == ctx.idempotency_key
        expired = row.expires_at is not None and row.expires_at <= now
        if row.holder_key and not mine and not expired:
            return _wait(row, call, step_no=step_no, actor=actor, now=now)
        if row.holder_key and expired:
            dead = Holder(key=row.holder_key, task_id=row.holder_task_id or 0,
                          step_no=row.holder_step_no or 0, token=row.fencing_token,
                          tenant_id=ctx.tenant_id, resource=resource)
        row.fencing_token += 1
        row.holder_key, row.holder_task_id = ctx.idempotency_key, ctx.task_id
        row.holder_step_id, row.holder_step_no = ctx.step_id, step_no
        row.holder_owner, row.acquired_at = owner, now
        # A second past the call's ledger claim (taken no earlier than now): once the
        # lease expired, the ledger can tell whether its call was interrupted.
        row.expires_at = now + timedelta(seconds=claim_s(spec.timeout_s) + 1)
        row.save()
        LeaseWaiter.objects.filter(tenant_id=ctx.tenant_id, resource=resource,
                                   task_id=ctx.task_id).delete()
        _event(ctx.task_id, "lease_acquired", actor, {
            "resource": resource, "token": row.fencing_token, "step_no": step_no,
            "expires_at": row.expires_at.isoformat()})
        if dead is not None:
            _event(dead.task_id, "lease_expired", actor, {
                "resource": resource, "token": dead.token, "step_no": dead.step_no,
                "taken_by": {"task": ctx.task_id, "step_no": step_no}})
    hold = ResourceHold(resource=resource, token=row.fencing_token, tenant_id=ctx.tenant_id,
                        task_id=ctx.task_id, step_no=step_no, key=ctx.idempotency_key,
                        actor=actor)
    if dead is not None and dead.key != ctx.idempotency_key:
        # Another call held it and died: settle that call before this one touches the
        # resource (re-run under its own key, or leave it to a reconciliation).
        settle_dead_holder(dead, owner=owner, actor=actor)
    return hold


def _wait(row: ResourceLease, call: ToolCall, *, step_no: int, actor: Actor,
          now: object) -> ResourceHold:
    ctx = call.context
    _, created = LeaseWaiter.objects.get_or_create(
        tenant_id=ctx.tenant_id, resource=row.resource, task_id=ctx.task_id,
        defaults={"step_no": step_no})
    holder = {"task": row.holder_task_id, "step_no": row.holder_step_no}
    if created:  # once per wait, not once per look
        _event(ctx.task_id, "lease_waiting", actor,
               {"resource": row.resource, "step_no": step_no, "held_by": holder})
    assert row.expires_at is not None
    until_expiry = (row.expires_at - now).total_seconds()  # type: ignore[operator]
    cap = settings.TETHER["LEASE_WAIT_RECHECK_S"]
    delay = max(0.05, min(until_expiry, cap)) + random.uniform(0, 0.05)
    return ResourceHold(resource=row.resource, waiting=True, delay_s=delay,
                        note=f"waiting for resource {row.resource}, held by task "
                             f"{row.holder_task_id} step {row.holder_step_no}")


def lease_release(hold: ResourceHold) -> bool:
    """Free the lease `hold` took (if it still is the holder) and wake the waiters."""
    with transaction.atomic():
        freed = ResourceLease.objects.filter(
            tenant_id=hold.tenant_id, resource=hold.resource, holder_key=hold.key,
            fencing_token=hold.token,
        ).update(holder_key="", holder_task_id=None, holder_step_id=None, holder_step_no=None,
                 holder_owner="", expires_at=None, updated_at=timezone.now())
        if not freed:
            return False  # it expired and was taken over: not ours to free
        _event(hold.task_id, "lease_released", hold.actor,
               {"resource": hold.resource, "token": hold.token, "step_no": hold.step_no})
        waiters = list(LeaseWaiter.objects.filter(tenant_id=hold.tenant_id,
                                                  resource=hold.resource)
                       .values_list("pk", "task_id"))
        running = set(Task.objects.filter(pk__in=[t for _, t in waiters],
                                          status=TaskStatus.RUNNING)
                      .values_list("pk", flat=True))
        LeaseWaiter.objects.filter(pk__in=[pk for pk, t in waiters if t not in running]).delete()
        woken = sorted(running)
        # After commit: a woken task must see the lease free.
        transaction.on_commit(lambda: [schedule_advance(t) for t in woken])
    return True


def _event(task_id: int, type: str, actor: Actor, payload: dict[str, object]) -> None:
    event_note(task_id=task_id, type=type, actor=actor, payload=payload)
