"""tasks_app's registrations with its own lower layers, made once from
`TasksAppConfig.ready`: what the store and the services must set off above
them is handed to them here, so that none of them imports the runner, the
Celery entry points or the services above it.

- `store.hooks`: after an event commits, its observation and its publication;
  after a task leaves RUNNING, admission; after it fails, its compensation;
  after it ends, its parent's wake-up and its children's cancel (`services.children`);
  every recovery sweep, the children's check and the events table's months
  ahead (`store.partitions`);
- `accounts_app.hooks`: a user who lost access has their live sockets closed;
  a secret an agent profile names is not deleted;
- `foundations.console_errors`: a task's statuses as the console names them;
- `services.dispatch`: who runs a task's slices and compensations, per
  `TETHER_RUNNER` mode (Celery workers, or the embedded runner).
"""
from __future__ import annotations

from accounts_app.hooks import on_access_lost, on_secret_users
from foundations.console_errors import name_states

from .console.presenters import STATUS_LABELS
from .live.publish import end_user_sockets, publish_event
from .runner.embedded import EMBEDDED
from .selectors import agents_naming_secret
from .services.admission import admission_after_commit
from .services.children import children_sweep, on_task_ended
from .services.dispatch import register_executor, schedule_compensation
from .services.events import observe_committed
from .store import hooks
from .store.partitions import event_months_ensure
from .tasks import CELERY


def register() -> None:
    hooks.on_event_committed(observe_committed)
    hooks.on_event_committed(publish_event)
    hooks.on_slot_freed(admission_after_commit)
    hooks.on_task_failed(schedule_compensation)
    hooks.on_task_ended(on_task_ended)  # a child's parent is woken, a parent's children canceled
    hooks.on_sweep(children_sweep)
    hooks.on_sweep(event_months_ensure)  # the current month's partition and the next two
    on_access_lost(end_user_sockets)
    on_secret_users("agents", agents_naming_secret)
    name_states(STATUS_LABELS)
    register_executor("celery", CELERY)
    register_executor("embedded", EMBEDDED)
