"""What follows a committed event here: metrics count it and the task's trace
shows it (`task_traces`). Registered with the store
(`store.hooks.on_event_committed`) from `TasksAppConfig.ready`, before the live
feed's push (`live.publish`): the store writes every event and calls these
once the event's transaction has committed.
"""
from __future__ import annotations

from foundations.metrics import count_task_event

from ..machine import FINAL_STATUS_OF
from ..models import Event
from .task_traces import trace_event


def observe_committed(event: Event) -> None:
    count_task_event(event.type, final_status=FINAL_STATUS_OF.get(event.type, ""))
    trace_event(event)
