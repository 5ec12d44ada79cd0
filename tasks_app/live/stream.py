"""A task's stream: its recorded events after an id, then live ones and the
tokens of the decision being made, until the task ends. One source for every
front door that follows a task (the SSE endpoint, AG-UI, A2A, MCP, a CLI).

Interface::

    async for item in task_stream(task_id, after=last_event_id):
        match item:
            case Recorded(event):   # an event row, as `selectors.event_dict` gives it;
                ...                 # event["id"] is the resume point
            case Tokens(step_no, attempt, deltas):
                ...                 # a preview of the decision of step `step_no`
            case KeepAlive():       # nothing for `STREAM_KEEPALIVE_S` seconds
                ...
            case End(status, reason):   # the last item: the task ended ("terminal"),
                ...                     # or nothing came for `STREAM_IDLE_S` ("idle")

Guarantees, for a caller that resumes with the id of the last `Recorded` it
handled: every event comes once, in id order, none skipped (events are read
from the database; a live push only says "read again", and a read happens at
least every `POLL_S` seconds, so a lost push costs latency, never an event).
`Tokens` carry no id and are never replayed: once an event of their step has
been given (the recorded decision, or what became of it), later tokens of
that step are dropped, so a preview never follows what replaced it. A
preview is complete when it can be: the decision commits moments after its
last tokens are handed to the publisher, so when the database shows the
decision of a step whose preview is open, the tokens still on their way are
awaited (up to `GRACE_S`, until the one marked `last`) before the event is
given. Tokens of a new `attempt` (a retry, the fallback) start the step's
preview afresh; `Tokens.deltas` are as `live.tokens` describes.

The caller checks that the task is the requester's (tenant) before iterating;
this module reads without asking. It holds a channel-layer subscription for
as long as it is iterated: close it (``aclose``, or leave the ``async for``)
when the client goes.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings

from ..machine import TERMINAL
from ..models import Task
from ..selectors import event_dict, events_after
from .publish import TOKENS, task_group
from .tokens import step_of, superseded

PAGE = 500
POLL_S = 1.0  # the database is read at least this often while nothing is pushed
GRACE_S = 0.5  # the longest wait for the rest of a preview whose decision is recorded


@dataclass(frozen=True)
class Recorded:
    event: dict[str, Any]


@dataclass(frozen=True)
class Tokens:
    task_id: int
    step_no: int
    attempt: int
    deltas: list[dict[str, Any]]
    last: bool = False  # the attempt's last tokens: its preview is complete


@dataclass(frozen=True)
class KeepAlive:
    pass


@dataclass(frozen=True)
class End:
    status: str
    reason: str  # "terminal" or "idle"


StreamItem = Recorded | Tokens | KeepAlive | End


async def task_stream(task_id: int, *, after: int = 0, idle_s: float | None = None,
                      keepalive_s: float | None = None) -> AsyncGenerator[StreamItem, None]:
    """The items of task `task_id` after event id `after` (see the module's doc)."""
    idle_s = settings.TETHER["STREAM_IDLE_S"] if idle_s is None else idle_s
    keepalive_s = settings.TETHER["STREAM_KEEPALIVE_S"] if keepalive_s is None else keepalive_s
    layer = get_channel_layer()
    channel = ""
    if layer is not None:
        # Subscribed before the first read: nothing committed in between is missed.
        channel = await layer.new_channel()
        await layer.group_add(task_group(task_id), channel)
    last_id, decided_step = after, 0
    preview = 0  # the step whose tokens were given, their last one not yet
    now = time.monotonic()
    last_item = last_news = now
    try:
        while True:
            status, events = await _status_and_events(task_id, last_id)
            if preview and any(step_of(event) >= preview for event in events):
                async for tokens in _rest_of_preview(layer, channel, preview):
                    yield tokens
                preview = 0
            for event in events:
                last_id = event["id"]
                decided_step = max(decided_step, step_of(event))
                yield Recorded(event)
            if events:
                last_item = last_news = time.monotonic()
            if len(events) == PAGE:
                continue  # more to read before anything else
            if status is None or status in TERMINAL:
                yield End(status or "", "terminal")
                return
            # Wait for a push (or `POLL_S`), then read again.
            while True:
                now = time.monotonic()
                if now - last_news >= idle_s:
                    yield End(status, "idle")
                    return
                if now - last_item >= keepalive_s:
                    last_item = now
                    yield KeepAlive()
                message = await _next_message(layer, channel, POLL_S)
                if message is None or message.get("type") != TOKENS:
                    break  # an event was pushed, or it is time to look anyway
                if not superseded(message, decided_step):
                    last_item = last_news = time.monotonic()
                    tokens = _tokens(message)
                    preview = 0 if tokens.last else tokens.step_no
                    yield tokens
    finally:
        if layer is not None:
            await layer.group_discard(task_group(task_id), channel)


async def _rest_of_preview(layer: Any, channel: str,
                           step_no: int) -> AsyncGenerator[Tokens, None]:
    """The tokens of step `step_no` still on their way, until its last (or
    `GRACE_S`); other messages are dropped (the caller reads the database next)."""
    deadline = time.monotonic() + GRACE_S
    while (left := deadline - time.monotonic()) > 0:
        message = await _next_message(layer, channel, left)
        if message is None:
            return
        if message.get("type") == TOKENS and message["step_no"] == step_no:
            tokens = _tokens(message)
            yield tokens
            if tokens.last:
                return


def _tokens(message: dict[str, Any]) -> Tokens:
    return Tokens(task_id=message["task_id"], step_no=message["step_no"],
                  attempt=message["attempt"], deltas=message["deltas"],
                  last=bool(message.get("last")))


async def _next_message(layer: Any, channel: str, timeout_s: float) -> dict[str, Any] | None:
    if layer is None:
        await asyncio.sleep(timeout_s)  # no layer (a bare test process): poll the database
        return None
    try:
        return await asyncio.wait_for(layer.receive(channel), timeout=timeout_s)
    except TimeoutError:
        return None


@database_sync_to_async
def _status_and_events(task_id: int, after: int) -> tuple[str | None, list[dict[str, Any]]]:
    """The task's status, then its events after `after` (in that order: a
    terminal status read first means its event is among those read after)."""
    status = Task.objects.filter(pk=task_id).values_list("status", flat=True).first()
    return status, [event_dict(e) for e in events_after(task_id=task_id, after_id=after,
                                                         limit=PAGE)]
