"""The runner's side of the circuit breakers (`tools_app.breakers`): tasks that
wait for an open breaker, and their waking.

- A tool step of an `http` tool asks its breaker before the call
  (`tool_admit`); held, the call is not made: the ledger claim is given back
  (no attempt, no retry spent), the task notes that it waits
  (`breaker_waiting`, once per wait) and is handed back until the breaker's
  probe time, with jitter (`tool_wait`). What came of an admitted call is
  recorded after it (`tool_record`).
- A model call asks the breaker of each endpoint and model (`ModelGuard`, the
  gateway's `CallGuard`): the primary's first answer is read ahead, in the
  phase that plans the step (`model_admit_ahead`), so a call to a healthy
  model needs no database phase of its own; a held primary makes the gateway
  try the fallback;
  when the last word is a breaker's, the task waits in the same way
  (`model_wait`), and no model call is counted.
- When a breaker opens (or re-opens after a failed probe), the task whose call
  did it gets `breaker_opened`; when it closes, every task waiting for it gets
  `breaker_closed` and is handed to a worker at once (`_on_change`). A task
  whose wake-up is lost comes back at its own probe time all the same.

A waiting task holds no worker and no lease, and spends neither retries nor
budget other than time: its deadline still holds.
"""
from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django.db import connection, transaction

from foundations.actors import Actor
from tools_app.breakers import (
    Admission,
    BreakerPolicy,
    Target,
    admit,
    breaker_policy,
    on_change,
    outcome_signal,
    record,
    record_needed,
    wait_register,
    waiters_take,
)
from tools_app.executor import ToolOutcome, ledger
from tools_app.executor.types import ToolSpec
from tools_app.models import Breaker

from ..gateway.model_settings import parse_model_settings
from ..machine import TaskStatus
from ..models import Task
from ..services.dispatch import schedule_advance_on_commit
from ..snapshot import TaskSnapshot
from ..store.events import event_append, event_note
from .hops import Hop

T = TypeVar("T")
BREAKER_ACTOR = Actor.worker("breaker")


@dataclass(frozen=True)
class ToolGate:
    """A tool call's breaker and what it said (no breaker: always allowed)."""

    target: Target | None
    policy: BreakerPolicy | None
    admission: Admission

    @property
    def allowed(self) -> bool:
        return self.admission.allowed


FREE = ToolGate(None, None, Admission(allowed=True))


def tool_admit(snap: TaskSnapshot, spec: ToolSpec, *, owner: str) -> ToolGate:
    """Before a tool call: may it be made now? (http and mcp tools: a python tool
    is the deployment's own code, with no downstream to protect)"""
    if spec.kind not in ("http", "mcp"):
        return FREE
    policy = breaker_policy(spec.breaker)
    if not policy.enabled:
        return FREE
    target = Target.tool(tenant_id=snap.tenant_id, name=spec.name, url=spec.url)
    return ToolGate(target, policy,
                    admit(target, owner=owner, probe_ttl_s=ledger.claim_s(spec.timeout_s)))


def tool_wait(snap: TaskSnapshot, gate: ToolGate, claim: ledger.Claim | None) -> float:
    """The call was held: give back its claim, note the wait; the delay before
    the task comes back."""
    assert gate.target is not None and gate.policy is not None
    if claim is not None:
        ledger.release(claim, error={"type": "breaker_open",
                                     "message": f"the breaker of {gate.target.name} is open"})
    _note_wait(snap.id, gate.target, gate.admission)
    return gate.admission.wait_s(gate.policy.cooldown_s)


def tool_record_needed(gate: ToolGate, outcome: ToolOutcome) -> bool:
    """Has `tool_record` anything to write (else no database phase for it)?"""
    return gate.target is not None and record_needed(gate.admission,
                                                     failed=outcome_signal(outcome))


def tool_record(snap: TaskSnapshot, gate: ToolGate, outcome: ToolOutcome, *, owner: str) -> None:
    """After an admitted tool call: tell its breaker what came of it."""
    if gate.target is None or gate.policy is None:
        return
    record(gate.target, owner=owner, failed=outcome_signal(outcome), policy=gate.policy,
           seen=gate.admission, error=outcome.error, task_id=snap.id)


class ModelGuard:
    """The breakers of a task's model endpoints, for the gateway (`CallGuard`):
    awaited by the model call on the I/O loop, their database work handed to
    the slice's `hop`."""

    def __init__(self, snap: TaskSnapshot, *, owner: str, hop: Hop,
                 ahead: dict[str, Admission] | None = None) -> None:
        self.snap, self.owner, self.hop = snap, owner, hop
        self.policy = breaker_policy((snap.agent.get("model") or {}).get("breaker"))
        self.ahead = dict(ahead or {})  # `model_admit_ahead`'s, each used once
        self.seen: dict[str, Admission] = {}
        self.held: list[tuple[Target, Admission]] = []

    def _target(self, base_url: str, model: str) -> Target:
        return Target.model(tenant_id=self.snap.tenant_id, base_url=base_url, name=model)

    async def admit(self, base_url: str, model: str, *, timeout_s: float) -> float | None:
        if not self.policy.enabled:
            return None
        target = self._target(base_url, model)
        admission = self.ahead.pop(target.key, None)
        if admission is None:  # a retry, or the fallback: asked now
            admission = await self.hop(admit, target, owner=self.owner,
                                       probe_ttl_s=ledger.claim_s(timeout_s))
        if admission.allowed:
            self.seen[target.key] = admission
            return None
        self.held.append((target, admission))
        return admission.wait_s(self.policy.cooldown_s)

    async def record(self, base_url: str, model: str, *, failed: bool | None,
                     error: str) -> None:
        if not self.policy.enabled:
            return
        target = self._target(base_url, model)
        seen = self.seen.pop(target.key, Admission(allowed=True))
        if not record_needed(seen, failed=failed):
            return  # nothing to write: no database phase
        await self.hop(record, target, owner=self.owner, failed=failed, policy=self.policy,
                       seen=seen, error={"message": error} if error else None,
                       task_id=self.snap.id)


def model_admit_ahead(snap: TaskSnapshot, *, owner: str) -> dict[str, Admission]:
    """The admission of the model's primary endpoint, asked in the database
    phase just before the call (`deciding.plan_step`) instead of one of its own:
    what `ModelGuard.admit` would have read a moment later. Settings the
    gateway will refuse, or under which it would not call, are left to it
    (nothing is read ahead: a probe taken for a call never made would be held
    until it expires)."""
    model = snap.agent.get("model") or {}
    policy = breaker_policy(model.get("breaker"))
    if not policy.enabled or model.get("backend") != "openai":
        return {}
    try:
        settings = parse_model_settings(model)
    except (TypeError, ValueError):
        return {}
    if settings.max_retries < 0 or not (settings.primary.name and settings.primary.base_url):
        return {}
    primary = settings.primary
    target = Target.model(tenant_id=snap.tenant_id, base_url=primary.base_url, name=primary.name)
    return {target.key: admit(target, owner=owner,
                              probe_ttl_s=ledger.claim_s(settings.timeout_s))}


class _OffPool:
    """A hop for a guard used from inside a database phase (a summary's call,
    which waits for the I/O loop from that phase): the breaker's own queries run
    in the loop's default executor, never in the busy database pool it waits
    from, which could be full of such waits."""

    def __init__(self) -> None:
        self.worked_s = 0.0

    async def __call__(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(_closing, functools.partial(fn, *args, **kwargs))


def _closing(job: Callable[[], T]) -> T:
    try:
        return job()
    finally:
        connection.close()  # a rare path: the thread keeps no connection (nor pool slot)


def summary_guard(snap: TaskSnapshot, *, owner: str) -> ModelGuard:
    """The model's breakers for a context summary's call: an open breaker makes
    the summary the deterministic digest, without a call."""
    return ModelGuard(snap, owner=owner, hop=_OffPool())


def model_wait(snap: TaskSnapshot, guard: ModelGuard, delay_s: float) -> float:
    """The model's breakers held the call: note the wait; the delay before the
    task comes back."""
    for target, admission in guard.held:
        _note_wait(snap.id, target, admission)
    return delay_s


def _note_wait(task_id: int, target: Target, admission: Admission) -> None:
    if wait_register(target, task_id=task_id):
        _info_event(task_id, "breaker_waiting", {
            "kind": target.kind, "name": target.name, "state": admission.state,
            "until": admission.until.isoformat() if admission.until else None})


def _on_change(breaker: Breaker, change: str, task_id: int | None) -> None:
    about = {"kind": breaker.kind, "name": breaker.name}
    if change in ("opened", "reopened") and task_id is not None:
        _info_event(task_id, "breaker_opened", {
            **about, "reopened": change == "reopened", "failures": breaker.failures,
            "cooldown_s": breaker.cooldown_s,
            "until": breaker.open_until.isoformat() if breaker.open_until else None})
    elif change == "closed":
        woken = waiters_take(breaker.pk)
        _wake(woken, about)
        if task_id is not None and task_id not in woken:
            _info_event(task_id, "breaker_closed", {**about, "probe": True})


on_change(_on_change)


def _wake(task_ids: list[int], payload: dict[str, Any]) -> None:
    """`breaker_closed` on each waiting task still RUNNING, and each handed to a
    worker once that commits (one transaction: rows locked in id order). A task
    that came back by itself meanwhile and finished is left alone."""
    with transaction.atomic():
        rows = (Task.objects.select_for_update().filter(pk__in=task_ids, status=TaskStatus.RUNNING)
                .order_by("pk").values_list("pk", "version", "tenant_id", "trace_id"))
        for task_id, version, tenant_id, trace_id in rows:
            event_append(task_id=task_id, tenant_id=tenant_id, trace_id=trace_id,
                         task_version=version, type="breaker_closed", actor=BREAKER_ACTOR,
                         payload=payload)
            schedule_advance_on_commit(task_id)


def _info_event(task_id: int, type: str, payload: dict[str, Any], *,
                actor: Actor = BREAKER_ACTOR) -> bool:
    """An event on a RUNNING task at its current version (no transition,
    `event_note`). (The rate limits' waits too.)"""
    return event_note(task_id=task_id, type=type, actor=actor, payload=payload,
                      statuses=(TaskStatus.RUNNING,)) is not None


info_event = _info_event
