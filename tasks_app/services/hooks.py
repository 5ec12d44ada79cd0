"""Hooks other apps register to follow the task runtime, without the runtime
importing them (the layers point one way: a higher app registers here, from its
`AppConfig.ready`).

- `on_event_appended(types, hook)`: `hook(event)` runs inside the transaction
  that appends an event of one of `types` through `services.events.event_append`
  (every transition `task_transition` fires, and the other ORM-appended events),
  so what the hook writes commits or rolls back with the event. The runner's
  one-statement commits (`ONE_STATEMENT_TYPES`) write their events in SQL and
  call no hook: registering for those types is refused.
- `on_slot_freed(hook)`: `hook()` runs inside the transaction of every
  transition that takes a task out of RUNNING (`task_transition`): a slot is
  free, so admission (`services.admission`, which itself calls
  `task_transition`) may start a CREATED task once it commits.
- `on_sweep(hook)`: `hook()` runs at the end of every recovery sweep (Celery
  beat in production, the embedded runner's timer otherwise). A hook that
  raises is logged and does not stop the sweep or the other hooks.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models import Event

log = logging.getLogger(__name__)

EventHook = Callable[["Event"], None]
SweepHook = Callable[[], object]
SlotHook = Callable[[], None]

# Written by `runner.commits` in one SQL statement each, without `event_append`.
ONE_STATEMENT_TYPES = frozenset({"decision_recorded", "step_succeeded", "final_accepted"})

_event_hooks: dict[str, list[EventHook]] = {}
_sweep_hooks: list[SweepHook] = []
_slot_freed_hooks: list[SlotHook] = []


def on_event_appended(types: Iterable[str], hook: EventHook) -> None:
    types = frozenset(types)
    if types & ONE_STATEMENT_TYPES:
        raise ValueError(f"no hook sees {sorted(types & ONE_STATEMENT_TYPES)}: "
                         "they are written in one statement, without event_append")
    for type_ in types:
        hooks = _event_hooks.setdefault(type_, [])
        if hook not in hooks:  # ready() may run twice (tests, reloads)
            hooks.append(hook)


def on_slot_freed(hook: SlotHook) -> None:
    if hook not in _slot_freed_hooks:
        _slot_freed_hooks.append(hook)


def run_slot_freed_hooks() -> None:
    """Called by a transition out of RUNNING, in its transaction."""
    for hook in _slot_freed_hooks:
        hook()


def on_sweep(hook: SweepHook) -> None:
    if hook not in _sweep_hooks:
        _sweep_hooks.append(hook)


def run_event_hooks(event: Event) -> None:
    """Called by `event_append`, in its transaction: a hook's failure rolls the event back."""
    for hook in _event_hooks.get(event.type, ()):
        hook(event)


def run_sweep_hooks() -> None:
    for hook in list(_sweep_hooks):
        try:
            hook()
        except Exception:  # noqa: BLE001 - one app's sweep must not stop the recovery sweep
            log.exception("sweep hook %s failed", getattr(hook, "__qualname__", hook))
