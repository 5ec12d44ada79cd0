"""`Tether`, the synchronous client. Each method sends one described endpoint
(tether_client._operations); `AsyncTether` (tether_client.aio) has the same
methods, awaited."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import httpx

from . import _operations as ops
from . import models as m
from ._operations import Follower, Operation, StreamDelta
from .config import api_base, resolve
from .errors import StreamUnavailable

T = TypeVar("T")
DEFAULT_TIMEOUT_S = 30.0


def http_options(url: str | None, api_key: str | None, timeout: float) -> dict[str, Any]:
    """What both clients give their httpx client: the API root, the key, JSON."""
    settings = resolve(url, api_key)
    return {"base_url": api_base(settings.url), "timeout": timeout,
            "headers": {"Authorization": f"Token {settings.api_key}",
                        "Accept": "application/json",
                        "User-Agent": "tether-client/0.1"}}


class Tether:
    """A Tether server, through its REST API with one API key.

    `url` and `api_key` default to TETHER_URL and TETHER_API_KEY, then to the
    file `tether login` wrote. Errors raise `tether_client.errors.TetherError`
    (a subclass per status), carrying the API's error code and field errors.
    """

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S, transport: httpx.BaseTransport | None = None
                 ) -> None:
        self._http = httpx.Client(transport=transport, **http_options(url, api_key, timeout))

    def __enter__(self) -> Tether:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def send(self, op: Operation[T]) -> T:
        return op.result(self._http.request(op.method, op.path, **op.request_args()))

    # tasks
    def submit(self, agent: str | None = None, goal: str = "", input: dict[str, Any] | None = None,
               *, workflow: str | None = None, subject: str | None = None,
               script: list[Any] | None = None, idempotency_key: str | None = None) -> m.Task:
        """Submit a task; the same `idempotency_key` and body again return the same task."""
        return self.send(ops.submit(agent=agent, goal=goal, input=input, workflow=workflow,
                                    subject=subject, script=script,
                                    idempotency_key=idempotency_key))

    def task(self, task_id: int) -> m.TaskDetail:
        return self.send(ops.task(task_id))

    def tasks(self, *, status: Iterable[str] | str | None = None, agent: str | None = None,
              mine: bool = False, limit: int | None = None, cursor: str | None = None
              ) -> m.TaskPage:
        return self.send(ops.tasks(status=status, agent=agent, mine=mine, limit=limit,
                                   cursor=cursor))

    def cancel(self, task_id: int, *, reason: str = "",
               expected_version: int | None = None) -> m.Task:
        return self.send(ops.cancel(task_id, reason=reason, expected_version=expected_version))

    def retry(self, task_id: int, *, from_step: int | None = None, from_node: str | None = None,
              comment: str = "", budget: dict[str, Any] | None = None) -> m.Task:
        return self.send(ops.retry(task_id, from_step=from_step, from_node=from_node,
                                   comment=comment, budget=budget))

    def answer(self, task_id: int, text: str, *, expected_version: int | None = None) -> m.Task:
        """Answer the question the task waits on."""
        return self.send(ops.answer(task_id, text, expected_version=expected_version))

    def events(self, task_id: int, *, after: int = 0, limit: int = 100) -> m.EventPage:
        return self.send(ops.events(task_id, after=after, limit=limit))

    def steps(self, task_id: int, *, after: int = 0, limit: int = 100) -> m.StepPage:
        return self.send(ops.steps(task_id, after=after, limit=limit))

    def follow(self, task_id: int, *, after: int = 0, poll_interval: float = 0.5
               ) -> Iterator[m.Event | StreamDelta]:
        """The task's events as they happen, each once, until it has ended
        (with the stream's token deltas when the server streams)."""
        follower, streams = Follower(task_id, after=after), True
        while True:
            if streams:
                try:
                    yield from self._stream(follower)
                except StreamUnavailable:
                    streams = False
            yield from self._caught_up(follower)
            if follower.ended(self.task(task_id)):
                yield from self._caught_up(follower)
                return
            time.sleep(poll_interval)  # between polls; or a stream that closed early

    def _stream(self, follower: Follower) -> Iterator[m.Event | StreamDelta]:
        try:
            with self._http.stream(**follower.stream_request()) as response:
                if response.is_error:
                    response.read()
                    raise follower.stream_refused(response)
                for line in response.iter_lines():
                    if (item := follower.read_line(line)) is not None:
                        yield item
                    elif follower.quiet():
                        return
        except (httpx.ReadTimeout, httpx.RemoteProtocolError):
            return  # quiet or dropped: the caller catches up by polling

    def _caught_up(self, follower: Follower) -> Iterator[m.Event]:
        while True:
            page = self.send(follower.events_request())
            yield from follower.new_events(page)
            if not page.has_more:
                return

    # human decisions
    def approvals(self, *, status: str | None = None, task_id: int | None = None,
                  limit: int | None = None, cursor: str | None = None) -> m.ApprovalPage:
        return self.send(ops.approvals(status=status, task_id=task_id, limit=limit,
                                       cursor=cursor))

    def approval(self, approval_id: int) -> m.Approval:
        return self.send(ops.approval(approval_id))

    def approve(self, approval_id: int, *, comment: str = "", args: dict[str, Any] | None = None,
                always_allow: bool = False, expected_version: int | None = None) -> m.Approval:
        return self.send(ops.approve(approval_id, comment=comment, args=args,
                                     always_allow=always_allow,
                                     expected_version=expected_version))

    def reject(self, approval_id: int, *, comment: str,
               expected_version: int | None = None) -> m.Approval:
        return self.send(ops.reject(approval_id, comment=comment,
                                    expected_version=expected_version))

    def questions(self, *, status: str | None = None, task_id: int | None = None,
                  limit: int | None = None, cursor: str | None = None) -> m.QuestionPage:
        return self.send(ops.questions(status=status, task_id=task_id, limit=limit,
                                       cursor=cursor))

    def inbox(self, *, limit: int | None = None) -> m.Inbox:
        return self.send(ops.inbox(limit=limit))

    # tools and agents (admins)
    def tools(self) -> list[m.Tool]:
        return self.send(ops.TOOLS.all())

    def tool(self, name: str) -> m.Tool:
        return self.send(ops.TOOLS.one(name))

    def create_tool(self, name: str, **fields: Any) -> m.Tool:
        return self.send(ops.TOOLS.create(name, fields))

    def update_tool(self, name: str, **changes: Any) -> m.Tool:
        return self.send(ops.TOOLS.update(name, changes))

    def agents(self) -> list[m.Agent]:
        return self.send(ops.AGENTS.all())

    def agent(self, name: str) -> m.Agent:
        return self.send(ops.AGENTS.one(name))

    def create_agent(self, name: str, **fields: Any) -> m.Agent:
        return self.send(ops.AGENTS.create(name, fields))

    def update_agent(self, name: str, **changes: Any) -> m.Agent:
        return self.send(ops.AGENTS.update(name, changes))
