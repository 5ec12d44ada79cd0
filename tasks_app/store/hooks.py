"""What layers above the store register to follow it, without the store
importing them (the layers point one way: the registering app does it from its
`AppConfig.ready`).

- `on_event_appended(types, hook)`: `hook(event)` runs inside the transaction
  that appends an event of one of `types`, whichever backend writes it (the
  ORM's `store.events.event_append`, or PostgreSQL's one-statement commit,
  which then runs in a transaction with the hooks after its statement), so
  what the hook writes commits or rolls back with the event. A commit of a
  type nobody hooks stays one statement on PostgreSQL.
- `on_event_committed(hook)`: `hook(event)` publishes every event once its
  transaction has committed (metrics, the task's trace, the live feed). A
  publisher that raises is logged: the write it publishes has committed, and
  must not read as failed to its caller (a step's decision would then be
  counted twice), nor keep the other publishers from running.
- `on_slot_freed(hook)`: a task left RUNNING; `hook()` schedules admission
  after commit. `on_task_failed(hook)`: `hook(task_id)` runs after a task's
  FAILED transition commits (compensation). `on_task_ended(hook)`:
  `hook(task_id)` runs after any transition that ends a task commits (a
  child task's parent is woken, its own children canceled).
- `on_task_end_close(model, open_status, canceled_status)`: a kind of human
  request a task that ends closes (its `status` goes from `open_status` to
  `canceled_status`), in the transaction that ends it.
- `on_sweep(hook)`: `hook()` runs at the end of every recovery sweep (the
  workers' sweepers and Celery beat in production, the embedded runner's
  timer otherwise). A hook that
  raises is logged and does not stop the sweep or the other hooks.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from django.db import models

if TYPE_CHECKING:
    from ..models import Event

log = logging.getLogger(__name__)

EventHook = Callable[["Event"], None]
SweepHook = Callable[[], object]

_event_hooks: dict[str, list[EventHook]] = {}
_sweep_hooks: list[SweepHook] = []
_publishers: list[EventHook] = []
_slot_freed: list[Callable[[], None]] = []
_task_failed: list[Callable[[int], None]] = []
_task_ended: list[Callable[[int], None]] = []
# (model, its open status, its canceled status): the human requests a task that ends closes
OPEN_REQUESTS: list[tuple[type[models.Model], str, str]] = []


def _add(hooks: list, hook: object) -> None:  # type: ignore[type-arg]
    if hook not in hooks:  # ready() may run twice (tests, reloads)
        hooks.append(hook)


def on_event_appended(types: Iterable[str], hook: EventHook) -> None:
    for type_ in frozenset(types):
        _add(_event_hooks.setdefault(type_, []), hook)


def on_event_committed(hook: EventHook) -> None:
    _add(_publishers, hook)


def on_slot_freed(hook: Callable[[], None]) -> None:
    _add(_slot_freed, hook)


def on_task_failed(hook: Callable[[int], None]) -> None:
    _add(_task_failed, hook)


def on_task_ended(hook: Callable[[int], None]) -> None:
    _add(_task_ended, hook)


def on_task_end_close(model: type[models.Model], open_status: str,
                      canceled_status: str) -> None:
    _add(OPEN_REQUESTS, (model, open_status, canceled_status))


def on_sweep(hook: SweepHook) -> None:
    _add(_sweep_hooks, hook)


def event_hooked(type_: str) -> bool:
    """Has any app registered a hook for events of `type_`?"""
    return bool(_event_hooks.get(type_))


def run_event_hooks(event: Event) -> None:
    """Called by the backend that wrote `event`, in its transaction: a hook's
    failure rolls the event back."""
    for hook in _event_hooks.get(event.type, ()):
        hook(event)


def run_publishers(event: Event) -> None:
    for hook in _publishers:
        try:
            hook(event)
        except Exception:  # noqa: BLE001 - the event has committed; see the module docstring
            log.exception("publishing event %s (%s) failed in %s", event.pk, event.type,
                          getattr(hook, "__qualname__", hook))


def run_slot_freed() -> None:
    for hook in _slot_freed:
        hook()


def run_task_failed(task_id: int) -> None:
    for hook in _task_failed:
        hook(task_id)


def run_task_ended(task_id: int) -> None:
    for hook in _task_ended:
        try:
            hook(task_id)
        except Exception:  # noqa: BLE001 - the end has committed; the sweep catches up
            log.exception("task-ended hook %s failed for task %s",
                          getattr(hook, "__qualname__", hook), task_id)


def run_sweep_hooks() -> None:
    for hook in list(_sweep_hooks):
        try:
            hook()
        except Exception:  # noqa: BLE001 - one app's sweep must not stop the recovery sweep
            log.exception("sweep hook %s failed", getattr(hook, "__qualname__", hook))
