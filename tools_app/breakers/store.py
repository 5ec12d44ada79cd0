"""Circuit breakers shared by every worker, one row per guarded downstream
(`tools_app.models.Breaker`), changed only by conditional UPDATEs so that
concurrent workers agree on each change and exactly one of them makes it.

    closed --(`failures` transient failures in a row)--> open
    open --(cool-down over: the first caller takes the probe)--> half_open
    half_open --(the probe's call answered)--> closed
    half_open --(the probe's call failed)--> open, the cool-down doubled (capped)

- `admit` before a call: closed admits everybody; open admits nobody until
  `open_until`; then one caller at a time takes the probe (a lease of
  `probe_ttl_s`: a probe whose holder died is taken over after it) and every
  other caller is told when to come back.
- `record` after the call, with `outcome_signal`'s verdict. A success resets
  the count of failures; only the probe's own result closes or re-opens a
  half-open breaker (a late answer to a call admitted before the breaker
  opened changes nothing).

A missing row reads as closed and is written at the first failure. A row
read as closed with no failures (or missing) is trusted by the process that
read it for `TETHER_BREAKER_RECHECK_S` (`_Healthy`), so a healthy downstream
costs one indexed read per process and second, not one per call (two per
step of a model and a tool: a tenth of a step's work). What that gives up: a
breaker opened by another process holds this process's calls up to that much
later, unless one of its own calls failed first (a failure, recorded, makes
the process read the row again before each call). Every change of state is
announced to the listeners registered with `on_change` (the runner wakes the
tasks that wait, `tasks_app.runner.breaker_waits`), after its UPDATE.
"""
from __future__ import annotations

import hashlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from foundations.metrics import count_breaker_change
from tasks_app.store.backends import backend

from ..models import Breaker, BreakerState, BreakerWaiter
from .policy import BreakerPolicy

log = logging.getLogger(__name__)

# The longest a waiting task stays away when the probe's holder is unknown.
WAIT_FALLBACK_S = 5.0


@dataclass(frozen=True)
class Target:
    """What a breaker guards: one tenant's tool, or one tenant's model endpoint.
    Breakers are per tenant: a tenant cannot open another tenant's breaker."""

    key: str
    tenant_id: int
    kind: str
    name: str
    url: str = ""

    @classmethod
    def tool(cls, *, tenant_id: int, name: str, url: str = "") -> Target:
        return cls(key=f"tool:{tenant_id}:{name}", tenant_id=tenant_id, kind="tool", name=name,
                   url=url)

    @classmethod
    def model(cls, *, tenant_id: int, base_url: str, name: str) -> Target:
        digest = hashlib.sha256(f"{base_url}|{name}".encode()).hexdigest()[:32]
        return cls(key=f"model:{tenant_id}:{digest}", tenant_id=tenant_id, kind="model",
                   name=name, url=base_url)


@dataclass(frozen=True)
class Admission:
    """`allowed`: call now (`probe`: as the half-open breaker's one probe); else
    come back at `until`. `failures` as read, so a success need not write."""

    allowed: bool
    state: str = BreakerState.CLOSED
    probe: bool = False
    until: datetime | None = None
    failures: int = 0

    def wait_s(self, cooldown_s: float = 0.0) -> float:
        """Seconds until the caller should try again, jittered so the tasks
        that wait on one breaker do not come back all at once."""
        left = max(0.0, ((self.until or timezone.now()) - timezone.now()).total_seconds())
        return left + random.uniform(0.0, max(0.5, 0.2 * cooldown_s))


OPEN = Admission(allowed=True)


class _Healthy:
    """The breakers this process read as closed with no failures, each until a
    monotonic time. Shared by the process's threads (a dict's single operations
    are atomic); bounded, forgotten all at once when full."""

    LIMIT = 10_000

    def __init__(self) -> None:
        self._until: dict[str, float] = {}

    def fresh(self, key: str) -> bool:
        return self._until.get(key, 0.0) > time.monotonic()

    def note(self, key: str) -> None:
        seconds = float(settings.TETHER["BREAKER_RECHECK_S"])
        if seconds <= 0:
            return
        if len(self._until) >= self.LIMIT:
            self._until.clear()
        self._until[key] = time.monotonic() + seconds

    def forget(self, key: str) -> None:
        self._until.pop(key, None)

    def clear(self) -> None:
        self._until.clear()


_healthy = _Healthy()


def forget_healthy() -> None:
    """Read every breaker again at its next call (after a change made outside
    `record`, e.g. a test's or an admin's write to the rows)."""
    _healthy.clear()

# (breaker row after the change, change, the task whose call caused it, or None)
Listener = Callable[[Breaker, str, "int | None"], None]
_listeners: list[Listener] = []


def on_change(listener: Listener) -> None:
    """Register `listener` for every change of state (opened, half_open,
    reopened, closed); registering the same function twice is a no-op."""
    if listener not in _listeners:
        _listeners.append(listener)


def admit(target: Target, *, owner: str, probe_ttl_s: float) -> Admission:
    """May `owner` call `target` now? Never raises for a closed breaker's row."""
    if _healthy.fresh(target.key):
        return OPEN
    # read before every call to a downstream: the backend's (prepared on PostgreSQL)
    row = backend().breaker_row(target.key)
    if row is None or row["state"] == BreakerState.CLOSED:
        failures = row["failures"] if row else 0
        if not failures:
            _healthy.note(target.key)
        return Admission(allowed=True, failures=failures)
    now = timezone.now()
    if row["state"] == BreakerState.OPEN and row["open_until"] and row["open_until"] > now:
        return Admission(allowed=False, state=BreakerState.OPEN, until=row["open_until"])
    if row["state"] == BreakerState.HALF_OPEN and row["probe_owner"] == owner:
        return Admission(allowed=True, state=BreakerState.HALF_OPEN, probe=True)
    if row["state"] == BreakerState.HALF_OPEN and row["probe_owner"] and (
            row["probe_until"] and row["probe_until"] > now):
        return Admission(allowed=False, state=BreakerState.HALF_OPEN, until=row["probe_until"])
    # The cool-down is over, or the probe's holder went away: take the probe.
    due = Q(state=BreakerState.OPEN, open_until__lte=now) | Q(
        state=BreakerState.HALF_OPEN) & (Q(probe_owner="") | Q(probe_until__lt=now))
    was_open = row["state"] == BreakerState.OPEN
    changes: dict[str, Any] = {"state": BreakerState.HALF_OPEN, "probe_owner": owner,
                               "probe_until": now + timedelta(seconds=probe_ttl_s)}
    if was_open:
        changes["changed_at"] = now
    if Breaker.objects.filter(due, key=target.key).update(**changes):
        if was_open:
            _announce(target, "half_open", None)
        return Admission(allowed=True, state=BreakerState.HALF_OPEN, probe=True)
    # Somebody else took it first.
    now_row = Breaker.objects.filter(key=target.key).values("state", "open_until",
                                                             "probe_until").first()
    if now_row is None or now_row["state"] == BreakerState.CLOSED:
        return OPEN
    until = (now_row["probe_until"] if now_row["state"] == BreakerState.HALF_OPEN
             else now_row["open_until"])
    return Admission(allowed=False, state=now_row["state"],
                     until=until or now + timedelta(seconds=WAIT_FALLBACK_S))


def record_needed(seen: Admission, *, failed: bool | None) -> bool:
    """Has `record` anything to write? Not for the common case, an answer to a
    call admitted with no failures counted, nor for a call that never reached
    the downstream (outside a probe): the caller need not enter a database
    phase for it."""
    return seen.probe or failed is True or (failed is False and seen.failures > 0)


def record(target: Target, *, owner: str, failed: bool | None, policy: BreakerPolicy,
           seen: Admission = OPEN, error: Any = None, task_id: int | None = None) -> str | None:
    """What came of a call `admit` allowed (`seen`): `failed` True (an outage),
    False (an answer) or None (the call never reached the downstream). Returns
    the change it made ("opened", "reopened", "closed"), if any."""
    now = timezone.now()
    if failed:  # this process reads the row again before its next call
        _healthy.forget(target.key)
    if seen.probe:
        return _probe_done(target, owner=owner, failed=failed, policy=policy, error=error,
                           task_id=task_id, now=now)
    if not record_needed(seen, failed=failed):
        return None
    if not failed:  # an answer after failures: their run ends
        Breaker.objects.filter(key=target.key, state=BreakerState.CLOSED,
                               failures__gt=0).update(failures=0)
        return None
    Breaker.objects.bulk_create([Breaker(key=target.key, tenant_id=target.tenant_id,
                                         kind=target.kind, name=target.name[:200],
                                         target=target.url[:500])], ignore_conflicts=True)
    counted = Breaker.objects.filter(key=target.key, state=BreakerState.CLOSED).update(
        failures=F("failures") + 1, last_error=error)
    if not counted:
        return None  # open or half-open already: a late failure of an earlier call
    # Exactly one of the workers whose failures reached the threshold opens it.
    opened = Breaker.objects.filter(
        key=target.key, state=BreakerState.CLOSED, failures__gte=policy.failures,
    ).update(state=BreakerState.OPEN, cooldown_s=policy.cooldown_s,
             open_until=now + timedelta(seconds=policy.cooldown_s), probe_owner="",
             probe_until=None, opened_count=F("opened_count") + 1, changed_at=now)
    if opened:
        _announce(target, "opened", task_id)
        return "opened"
    return None


def _probe_done(target: Target, *, owner: str, failed: bool | None, policy: BreakerPolicy,
                error: Any, task_id: int | None, now: datetime) -> str | None:
    mine = Breaker.objects.filter(key=target.key, state=BreakerState.HALF_OPEN,
                                  probe_owner=owner)
    if failed is None:  # nothing reached the downstream: the next caller probes
        mine.update(probe_owner="", probe_until=None)
        return None
    if not failed:
        if mine.update(state=BreakerState.CLOSED, failures=0, cooldown_s=0.0, open_until=None,
                       probe_owner="", probe_until=None, changed_at=now):
            _announce(target, "closed", task_id)
            return "closed"
        return None
    current = mine.values_list("cooldown_s", flat=True).first()
    if current is None:
        return None  # the probe's lease was taken over: the new holder decides
    cooldown = min(policy.max_cooldown_s, max(policy.cooldown_s, current * 2))
    if mine.update(state=BreakerState.OPEN, cooldown_s=cooldown,
                   open_until=now + timedelta(seconds=cooldown), probe_owner="",
                   probe_until=None, last_error=error, opened_count=F("opened_count") + 1,
                   changed_at=now):
        _announce(target, "reopened", task_id)
        return "reopened"
    return None


def _announce(target: Target, change: str, task_id: int | None) -> None:
    count_breaker_change(kind=target.kind, change=change)
    row = Breaker.objects.filter(key=target.key).first()
    log.warning("breaker of %s %s %s (tenant %s)", target.kind, target.name, change,
                target.tenant_id)
    if row is None:
        return
    for listener in list(_listeners):
        try:
            listener(row, change, task_id)
        except Exception:  # noqa: BLE001 - a listener must not undo the change it hears of
            log.exception("a breaker listener failed on %s %s", target.key, change)


# --- the tasks that wait ---------------------------------------------------------------


def wait_register(target: Target, *, task_id: int) -> bool:
    """Note that `task_id` waits for `target`'s breaker; True when it did not yet.

    A close hands over the waiters it finds after its commit, so a waiter noted
    just after a close would stay behind for good: the state is read again
    after the insert, and a breaker found closed takes the row back (the task
    comes back at its own delay)."""
    breaker_id = Breaker.objects.filter(key=target.key).values_list("id", flat=True).first()
    if breaker_id is None:
        return False
    try:
        with transaction.atomic():
            waiter = BreakerWaiter.objects.create(breaker_id=breaker_id, task_id=task_id)
    except IntegrityError:
        return False
    if Breaker.objects.filter(pk=breaker_id, state=BreakerState.CLOSED).exists():
        BreakerWaiter.objects.filter(pk=waiter.pk).delete()
        return False
    return True


def waiters_take(breaker_id: int) -> list[int]:
    """The tasks waiting for a breaker, forgotten as they are handed over."""
    with transaction.atomic():
        rows = list(BreakerWaiter.objects.select_for_update(skip_locked=True)
                    .filter(breaker_id=breaker_id).values_list("id", "task_id"))
        BreakerWaiter.objects.filter(id__in=[r[0] for r in rows]).delete()
    return [task_id for _id, task_id in rows]
