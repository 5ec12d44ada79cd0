"""A task's events, for the A2A streams: those after a given event id, then
the new ones as they commit, until the task has ended.

Stand-in: this is to be replaced by the shared event source of
`GET /api/v1/tasks/{id}/stream` (built in parallel, `tasks_app.live`), which
pushes instead of polling. The interface is kept to that one async iterator,
`task_events(task_id, after=...)`, so the swap touches nothing else here.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from channels.db import database_sync_to_async

from tasks_app.machine import TERMINAL
from tasks_app.models import Event, Task
from tasks_app.selectors import events_after

POLL_S = 0.2


def _page(task_id: int, after: int) -> tuple[list[Event], bool]:
    # The status first: once it is terminal, every event of the task has committed.
    status = Task.objects.filter(pk=task_id).values_list("status", flat=True).first()
    return events_after(task_id=task_id, after_id=after), status is None or status in TERMINAL


async def task_events(task_id: int, *, after: int = 0) -> AsyncIterator[Event]:
    """Events of task `task_id` with ids above `after`, in order; ends after the
    last one of a task that has ended (a caller may stop sooner)."""
    page = database_sync_to_async(_page)
    while True:
        events, ended = await page(task_id, after)
        for event in events:
            yield event
            after = event.pk
        if not events:
            if ended:
                return
            await asyncio.sleep(POLL_S)
