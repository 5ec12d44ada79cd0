"""Who starts a schedule's run, per target kind (`{"agent": name}`,
`{"workflow": name}`): registered from an `AppConfig.ready`, never imported, so
this app depends on no app whose runs it starts. `schedules_app.hooks`
registers `agent`; the app that owns workflows registers `workflow`.

A starter takes a `ScheduledStart` and returns what it submitted (the
`Submitted` of `tasks_app.services.tasks`: its `task` is the run's task). It
must honour `idempotency_key` (the same key returns the same task) and refuse
with a `DomainError` what cannot start (a target deleted since): the sweep
records that as a failed run. `exists(tenant_id, name)` answers at creation
whether the target is there (a kind registered without it is checked only
when it fires).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from foundations.actors import Actor


@dataclass(frozen=True)
class ScheduledStart:
    tenant_id: int
    requester_id: int | None  # the schedule's creator
    name: str  # the target's name
    input: dict[str, Any]
    goal: str
    script: list[Any] | None
    idempotency_key: str
    actor: Actor


Starter = Callable[[ScheduledStart], Any]  # returns a `Submitted`
Exists = Callable[[int, str], bool]


@dataclass(frozen=True)
class TargetKind:
    start: Starter
    exists: Exists | None = None


_kinds: dict[str, TargetKind] = {}


def register_target_kind(kind: str, start: Starter, *, exists: Exists | None = None) -> None:
    _kinds[kind] = TargetKind(start=start, exists=exists)


def target_kind(kind: str) -> TargetKind | None:
    return _kinds.get(kind)


def target_kinds() -> list[str]:
    return sorted(_kinds)
