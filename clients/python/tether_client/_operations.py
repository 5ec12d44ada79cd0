"""Every endpoint the client calls, described once: method, path, query, body,
headers and how the answer is read. `Tether` and `AsyncTether` only send these
(tether_client.client, tether_client.aio), so the two cannot disagree.

The paths and bodies are those of Tether's views (config/api_urls.py and the
serializers of tasks_app.api, approvals_app.api, tools_app.api); Tether's suite
checks that each one is in the server's OpenAPI schema
(tests/clients/test_models_match_schema.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qs, quote, urlsplit

import httpx
from pydantic import TypeAdapter

from . import models as m
from ._sse import SseMessage, SseParser
from .errors import StreamUnavailable, error_of

T = TypeVar("T")
API_PREFIX = "/api/v1"
# Statuses at which a task has ended (TASK_STATUS_ENUM's last three).
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "CANCELED"})


@dataclass(frozen=True)
class Operation(Generic[T]):
    """One request and how its answer is read (`read`: the JSON body to T)."""

    method: str
    path: str  # below /api/v1
    read: Callable[[Any], T]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)

    def request_args(self) -> dict[str, Any]:
        args: dict[str, Any] = {
            "params": {k: v for k, v in self.params.items() if v is not None and v != []},
            "headers": self.headers,
        }
        if self.json is not None:
            args["json"] = self.json
        return args

    def result(self, response: httpx.Response) -> T:
        """The answer read, or the API's error raised (tether_client.errors)."""
        body = _json_or_none(response)
        if response.is_error:
            raise error_of(response.status_code, body, response.headers)
        return self.read(body)


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json() if response.content else None
    except ValueError:
        return None


def _model(cls: type[T]) -> Callable[[Any], T]:
    return TypeAdapter(cls).validate_python


def _body(**fields: Any) -> dict[str, Any]:
    """A request body without the fields left out (None)."""
    return {k: v for k, v in fields.items() if v is not None}


# --- tasks ---------------------------------------------------------------------------


def submit(*, agent: str | None, goal: str, input: dict[str, Any] | None,
           workflow: str | None, subject: str | None, script: list[Any] | None,
           idempotency_key: str | None) -> Operation[m.Task]:
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    body = _body(agent=agent, workflow=workflow, goal=goal, input=input or {}, subject=subject,
                 script=script)
    return Operation("POST", "/tasks", _model(m.Task), json=body, headers=headers)


def task(task_id: int) -> Operation[m.TaskDetail]:
    return Operation("GET", f"/tasks/{int(task_id)}", _model(m.TaskDetail))


def tasks(*, status: Iterable[str] | str | None, agent: str | None, mine: bool,
          limit: int | None, cursor: str | None) -> Operation[m.TaskPage]:
    statuses = [status] if isinstance(status, str) else list(status or [])
    return Operation("GET", "/tasks", _model(m.TaskPage), params={
        "status": statuses, "agent": agent, "mine": "true" if mine else None,
        "limit": limit, "cursor": cursor})


def next_cursor(page: m.TaskPage | m.ApprovalPage | m.QuestionPage) -> str | None:
    """The `cursor` that asks for the page after PAGE (older items), or None at the end."""
    if not page.next:
        return None
    cursors = parse_qs(urlsplit(page.next).query).get("cursor")
    return cursors[0] if cursors else None


def cancel(task_id: int, *, reason: str, expected_version: int | None) -> Operation[m.Task]:
    return Operation("POST", f"/tasks/{int(task_id)}/cancel", _model(m.Task),
                     json=_body(reason=reason, expected_version=expected_version))


def retry(task_id: int, *, from_step: int | None, from_node: str | None, comment: str,
          budget: dict[str, Any] | None) -> Operation[m.Task]:
    return Operation("POST", f"/tasks/{int(task_id)}/retry", _model(m.Task), json=_body(
        from_step=from_step, from_node=from_node, comment=comment, budget=budget))


def answer(task_id: int, text: str, *, expected_version: int | None) -> Operation[m.Task]:
    return Operation("POST", f"/tasks/{int(task_id)}/input", _model(m.Task),
                     json=_body(answer=text, expected_version=expected_version))


def events(task_id: int, *, after: int, limit: int) -> Operation[m.EventPage]:
    return Operation("GET", f"/tasks/{int(task_id)}/events", _model(m.EventPage),
                     params={"after": after, "limit": limit})


def steps(task_id: int, *, after: int, limit: int) -> Operation[m.StepPage]:
    return Operation("GET", f"/tasks/{int(task_id)}/steps", _model(m.StepPage),
                     params={"after": after, "limit": limit})


# --- human decisions -----------------------------------------------------------------


def approvals(*, status: str | None, task_id: int | None, limit: int | None,
              cursor: str | None) -> Operation[m.ApprovalPage]:
    return Operation("GET", "/approvals", _model(m.ApprovalPage), params={
        "status": status, "task": task_id, "limit": limit, "cursor": cursor})


def approval(approval_id: int) -> Operation[m.Approval]:
    return Operation("GET", f"/approvals/{int(approval_id)}", _model(m.Approval))


def approve(approval_id: int, *, comment: str, args: dict[str, Any] | None, always_allow: bool,
            expected_version: int | None) -> Operation[m.Approval]:
    return Operation("POST", f"/approvals/{int(approval_id)}/approve", _model(m.Approval),
                     json=_body(comment=comment, args=args, always_allow=always_allow,
                                expected_version=expected_version))


def reject(approval_id: int, *, comment: str,
           expected_version: int | None) -> Operation[m.Approval]:
    return Operation("POST", f"/approvals/{int(approval_id)}/reject", _model(m.Approval),
                     json=_body(comment=comment, expected_version=expected_version))


def questions(*, status: str | None, task_id: int | None, limit: int | None,
              cursor: str | None) -> Operation[m.QuestionPage]:
    return Operation("GET", "/questions", _model(m.QuestionPage), params={
        "status": status, "task": task_id, "limit": limit, "cursor": cursor})


def inbox(*, limit: int | None) -> Operation[m.Inbox]:
    return Operation("GET", "/inbox", _model(m.Inbox), params={"limit": limit})


# --- tools and agents (admins) -------------------------------------------------------


M = TypeVar("M", bound=m.Model)


@dataclass(frozen=True)
class Named(Generic[M]):
    """The endpoints of a resource an admin registers by name: list, read,
    create, change (PATCH, only the fields given)."""

    path: str
    model: type[M]

    def all(self) -> Operation[list[M]]:
        return Operation("GET", self.path,
                         lambda body: [self.model.model_validate(item) for item in body])

    def one(self, name: str) -> Operation[M]:
        return Operation("GET", f"{self.path}/{_name(name)}", _model(self.model))

    def create(self, name: str, fields: dict[str, Any]) -> Operation[M]:
        return Operation("POST", self.path, _model(self.model), json={**fields, "name": name})

    def update(self, name: str, changes: dict[str, Any]) -> Operation[M]:
        return Operation("PATCH", f"{self.path}/{_name(name)}", _model(self.model), json=changes)


TOOLS = Named("/tools", m.Tool)
AGENTS = Named("/agents", m.Agent)


def _name(name: str) -> str:
    """A tool or agent name as one path segment (the server answers 404 to a bad one)."""
    return quote(name, safe="")


# --- following a task ----------------------------------------------------------------


@dataclass(frozen=True)
class StreamDelta:
    """What the event stream carries besides events: a model's tokens as they
    arrive (`event` names the kind, `data` the parsed JSON or the text)."""

    event: str
    data: Any
    id: str | None


class Follower:
    """One task's events in order, each once, until the task has ended.

    From the server's event stream (`GET /tasks/{id}/stream`, Server-Sent Events
    resumed with Last-Event-ID) while the server has one; by polling
    `GET /tasks/{id}/events` when it has none. `stream_refused` is the one place
    that decides. Either way, whenever the stream closes or goes quiet, the
    events after the last one seen are read by polling and the task's status
    is checked: the stream may end or drop without a word, polling cannot.
    """

    # A stream with no news this long (keep-alives aside) is closed and the task checked.
    STREAM_IDLE_S = 15.0
    PAGE = 500

    def __init__(self, task_id: int, *, after: int = 0) -> None:
        self.task_id = int(task_id)
        self.cursor = after  # the last event id yielded
        self.last_event_id: str | None = str(after) if after else None
        self._parser = SseParser()
        self._news_at = time.monotonic()

    def stream_request(self) -> dict[str, Any]:
        """The arguments of httpx's `stream()` for (re)opening the stream."""
        self._parser, self._news_at = SseParser(), time.monotonic()
        headers = {"Accept": "text/event-stream"}
        if self.last_event_id is not None:
            headers["Last-Event-ID"] = self.last_event_id
        return {"method": "GET", "url": f"/tasks/{self.task_id}/stream", "headers": headers,
                "timeout": httpx.Timeout(30.0, read=self.STREAM_IDLE_S)}

    @staticmethod
    def stream_refused(response: httpx.Response) -> Exception:
        """What to raise for an error answer to the stream request (its body read):
        StreamUnavailable when the server has no stream for tasks (404: a server
        from before the stream, 406: not in this format), so the caller polls
        instead; the API's error otherwise."""
        if response.status_code in (404, 406):
            return StreamUnavailable(response.status_code)
        return error_of(response.status_code, _json_or_none(response), response.headers)

    def read_line(self, line: str) -> m.Event | StreamDelta | None:
        """What one line of the stream completes: an event not yielded yet, a
        delta, or nothing."""
        message = self._parser.feed(line)
        item = self._item_of(message) if message is not None else None
        if item is not None:
            self._news_at = time.monotonic()
        return item

    def quiet(self) -> bool:
        """No news on the stream for STREAM_IDLE_S: time to close it and check the
        task (a server's keep-alives would otherwise hold it open for ever)."""
        return time.monotonic() - self._news_at > self.STREAM_IDLE_S

    def _item_of(self, message: SseMessage) -> m.Event | StreamDelta | None:
        if message.event == "end":
            return None  # the server closes the stream next; the task is then checked
        try:
            data: Any = json.loads(message.data)
        except ValueError:
            data = message.data
        if message.id is not None:
            self.last_event_id = message.id
        if isinstance(data, dict) and {"id", "type", "payload"} <= data.keys():
            event = m.Event.model_validate(data)
            return self._new(event)
        return StreamDelta(message.event, data, message.id)

    def events_request(self) -> Operation[m.EventPage]:
        return events(self.task_id, after=self.cursor, limit=self.PAGE)

    def new_events(self, page: m.EventPage) -> list[m.Event]:
        return [e for e in page.results if self._new(e) is not None]

    def _new(self, event: m.Event) -> m.Event | None:
        if event.id <= self.cursor:
            return None
        self.cursor = event.id
        self.last_event_id = str(event.id)
        return event

    @staticmethod
    def ended(task: m.Task) -> bool:
        return task.status in TERMINAL
