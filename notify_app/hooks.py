"""notify_app's registrations with the task runtime (`tasks_app.services.hooks`),
made once from `NotifyConfig.ready`."""
from __future__ import annotations

from tasks_app.services.hooks import on_event_appended, on_sweep

from .events import NOTIFIED_TASK_EVENTS, on_task_event


def register() -> None:
    from .services.sweep import notify_sweep

    on_event_appended(NOTIFIED_TASK_EVENTS, on_task_event)
    on_sweep(notify_sweep)
