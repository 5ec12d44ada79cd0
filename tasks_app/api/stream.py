"""`GET /api/v1/tasks/{id}/stream`: a task's events and live tokens as
Server-Sent Events, or as AG-UI events.

Authenticated, role-checked and throttled like the rest of the task API (a
DRF view: another tenant's task is a 404, a bad query a 400 with field
errors, all in the API's JSON error shape); the body is an async generator
over `live.stream.task_stream`, iterated by the ASGI server's event loop, so
an open stream holds no thread.

Plain SSE (the default)::

    retry: 2000

    id: 41
    data: {"id": 41, "type": "decision_recorded", "payload": {...}, ...}

    event: tokens
    data: {"step_no": 3, "attempt": 2, "deltas": [{"kind": "text", "text": "..."}],
           "last": false}

    : keep-alive

    event: end
    data: {"status": "SUCCEEDED", "reason": "terminal"}

Recorded events are `message`s with ``id:`` their event id (the shape of
`GET /tasks/{id}/events`' items); tokens and the end carry no id, so a
browser's `EventSource` resumes after the last event whatever came between.
The stream starts after ``Last-Event-ID`` (a reconnect) or else ``?after=``.

AG-UI: ``?protocol=ag-ui``, or ``Accept: application/vnd.ag-ui+json`` (what
`tasks_app.api.agui` says). Still SSE on the wire (AG-UI's HTTP binding); each
message derived from a recorded event carries its id on the last of them.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from channels.db import database_sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request

from foundations.api_base import MAX_ID
from foundations.api_errors import error_responses
from foundations.ids import parse_id

from ..live.stream import End, KeepAlive, Recorded, StreamItem, Tokens, task_stream
from ..models import Step, Task
from .agui import AguiRun, encode
from .views import TAGS, TaskViewBase

AG_UI = "ag-ui"
AG_UI_MEDIA_TYPE = "application/vnd.ag-ui+json"
RETRY_MS = 2000


class StreamQuerySerializer(serializers.Serializer):
    after = serializers.IntegerField(
        min_value=0, max_value=MAX_ID, required=False, default=0,
        help_text="Start after this event id (a `Last-Event-ID` header wins).")
    protocol = serializers.ChoiceField(
        choices=["sse", AG_UI], required=False, default="sse",
        help_text="`ag-ui`: AG-UI events (or ask with `Accept: application/vnd.ag-ui+json`).")


class TaskStreamView(TaskViewBase):
    """A task's events, then its live ones and the model's tokens, until it ends."""

    policy = {"GET": "task.read"}

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # The stream is built by hand; what DRF renders here (errors) is always JSON.
        return JSONRenderer(), JSONRenderer.media_type

    @extend_schema(
        operation_id="tasks_stream",
        tags=TAGS,
        summary="Stream a task's events and live tokens (Server-Sent Events, or AG-UI)",
        description="Recorded events (with `id:`, resumable with `Last-Event-ID`), the "
        "model's tokens while a decision streams (`event: tokens`, no id), keep-alive "
        "comments, and `event: end` when the task ends. `?protocol=ag-ui` (or `Accept: "
        "application/vnd.ag-ui+json`) speaks AG-UI instead.",
        parameters=[StreamQuerySerializer, OpenApiParameter(
            "Last-Event-ID", OpenApiTypes.INT, OpenApiParameter.HEADER, required=False,
            description="The id of the last event received: the stream resumes after it.")],
        responses={(200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR),
                   **error_responses()},
    )
    def get(self, request: Request, task_id: int) -> StreamingHttpResponse:
        q = self.query(StreamQuerySerializer)
        after = q["after"]
        resumed = request.headers.get("Last-Event-ID")
        if resumed is not None:
            after = parse_id(resumed.strip() or "0")
            if after is None:
                raise ValidationError({"Last-Event-ID": ["an event id: digits, at most 18"]})
        task = self.task(task_id)
        ag_ui = q["protocol"] == AG_UI or AG_UI_MEDIA_TYPE in request.headers.get("Accept", "")
        body = (_agui(task.pk, task.status, after) if ag_ui else _sse(task.pk, after))
        response = StreamingHttpResponse(body, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: pass each message on at once
        return response


async def _sse(task_id: int, after: int) -> AsyncIterator[str]:
    yield f"retry: {RETRY_MS}\n\n"
    async for item in _items(task_id, after):
        yield sse_message(item)


def sse_message(item: StreamItem) -> str:
    """One stream item as a plain SSE message (see the module's doc)."""
    if isinstance(item, Recorded):
        return f"id: {item.event['id']}\ndata: {_json(item.event)}\n\n"
    if isinstance(item, Tokens):
        tokens = {"step_no": item.step_no, "attempt": item.attempt, "deltas": item.deltas,
                  "last": item.last}
        return f"event: tokens\ndata: {_json(tokens)}\n\n"
    if isinstance(item, End):
        return f"event: end\ndata: {_json({'status': item.status, 'reason': item.reason})}\n\n"
    return ": keep-alive\n\n"


async def _agui(task_id: int, status: str, after: int) -> AsyncIterator[str]:
    run = AguiRun(task_id, step=_step_of(task_id), result=_result_of(task_id))
    for event in run.start(status):
        yield encode(event)
    async for item in _items(task_id, after):
        if isinstance(item, KeepAlive):
            yield ": keep-alive\n\n"
            continue
        events = await run.item(item)
        event_id = item.event["id"] if isinstance(item, Recorded) else None
        for index, event in enumerate(events):
            yield encode(event, event_id if index == len(events) - 1 else None)
        if run.done:
            return


async def _items(task_id: int, after: int) -> AsyncIterator[StreamItem]:
    stream = task_stream(task_id, after=after)
    try:
        async for item in stream:
            yield item
    finally:
        await stream.aclose()  # the client went: leave the task's group now


def _step_of(task_id: int) -> Any:
    @database_sync_to_async
    def step(step_no: int) -> dict[str, Any]:
        row = Step.objects.filter(task_id=task_id, step_no=step_no).values(
            "args", "output").first()
        return dict(row) if row else {}
    return step


def _result_of(task_id: int) -> Any:
    @database_sync_to_async
    def result() -> Any:
        return Task.objects.filter(pk=task_id).values_list("result", flat=True).first()
    return result


def _json(value: Any) -> str:
    return json.dumps(value, default=str, separators=(",", ":"))
