"""`AsyncTether`: the client's methods for asyncio, each awaiting the same
described endpoint as `Tether`'s (tether_client._operations)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any, TypeVar

import httpx

from . import _operations as ops
from . import models as m
from ._operations import Follower, Operation, StreamDelta
from .client import DEFAULT_TIMEOUT_S, http_options
from .errors import StreamUnavailable

T = TypeVar("T")


class AsyncTether:
    """`Tether` for asyncio: the same methods, awaited (`follow` is an async iterator)."""

    def __init__(self, url: str | None = None, api_key: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._http = httpx.AsyncClient(transport=transport,
                                       **http_options(url, api_key, timeout))

    async def __aenter__(self) -> AsyncTether:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def send(self, op: Operation[T]) -> T:
        return op.result(await self._http.request(op.method, op.path, **op.request_args()))

    # tasks
    async def submit(self, agent: str | None = None, goal: str = "",
                     input: dict[str, Any] | None = None, *, workflow: str | None = None,
                     subject: str | None = None, script: list[Any] | None = None,
                     idempotency_key: str | None = None) -> m.Task:
        return await self.send(ops.submit(agent=agent, goal=goal, input=input,
                                          workflow=workflow, subject=subject, script=script,
                                          idempotency_key=idempotency_key))

    async def task(self, task_id: int) -> m.TaskDetail:
        return await self.send(ops.task(task_id))

    async def tasks(self, *, status: Iterable[str] | str | None = None,
                    agent: str | None = None, mine: bool = False, limit: int | None = None,
                    cursor: str | None = None) -> m.TaskPage:
        return await self.send(ops.tasks(status=status, agent=agent, mine=mine, limit=limit,
                                         cursor=cursor))

    async def cancel(self, task_id: int, *, reason: str = "",
                     expected_version: int | None = None) -> m.Task:
        return await self.send(ops.cancel(task_id, reason=reason,
                                          expected_version=expected_version))

    async def retry(self, task_id: int, *, from_step: int | None = None,
                    from_node: str | None = None, comment: str = "",
                    budget: dict[str, Any] | None = None) -> m.Task:
        return await self.send(ops.retry(task_id, from_step=from_step, from_node=from_node,
                                         comment=comment, budget=budget))

    async def answer(self, task_id: int, text: str, *,
                     expected_version: int | None = None) -> m.Task:
        return await self.send(ops.answer(task_id, text, expected_version=expected_version))

    async def events(self, task_id: int, *, after: int = 0, limit: int = 100) -> m.EventPage:
        return await self.send(ops.events(task_id, after=after, limit=limit))

    async def steps(self, task_id: int, *, after: int = 0, limit: int = 100) -> m.StepPage:
        return await self.send(ops.steps(task_id, after=after, limit=limit))

    async def follow(self, task_id: int, *, after: int = 0, poll_interval: float = 0.5
                     ) -> AsyncIterator[m.Event | StreamDelta]:
        """As `Tether.follow`: the task's events as they happen, until it has ended."""
        follower, streams = Follower(task_id, after=after), True
        while True:
            if streams:
                try:
                    async for item in self._stream(follower):
                        yield item
                except StreamUnavailable:
                    streams = False
            async for event in self._caught_up(follower):
                yield event
            if follower.ended(await self.task(task_id)):
                async for event in self._caught_up(follower):
                    yield event
                return
            await asyncio.sleep(poll_interval)  # between polls; or a stream that closed early

    async def _stream(self, follower: Follower) -> AsyncIterator[m.Event | StreamDelta]:
        try:
            async with self._http.stream(**follower.stream_request()) as response:
                if response.is_error:
                    await response.aread()
                    raise follower.stream_refused(response)
                async for line in response.aiter_lines():
                    if (item := follower.read_line(line)) is not None:
                        yield item
                    elif follower.quiet():
                        return
        except (httpx.ReadTimeout, httpx.RemoteProtocolError):
            return  # quiet or dropped: the caller catches up by polling

    async def _caught_up(self, follower: Follower) -> AsyncIterator[m.Event]:
        while True:
            page = await self.send(follower.events_request())
            for event in follower.new_events(page):
                yield event
            if not page.has_more:
                return

    # human decisions
    async def approvals(self, *, status: str | None = None, task_id: int | None = None,
                        limit: int | None = None, cursor: str | None = None) -> m.ApprovalPage:
        return await self.send(ops.approvals(status=status, task_id=task_id, limit=limit,
                                             cursor=cursor))

    async def approval(self, approval_id: int) -> m.Approval:
        return await self.send(ops.approval(approval_id))

    async def approve(self, approval_id: int, *, comment: str = "",
                      args: dict[str, Any] | None = None, always_allow: bool = False,
                      expected_version: int | None = None) -> m.Approval:
        return await self.send(ops.approve(approval_id, comment=comment, args=args,
                                           always_allow=always_allow,
                                           expected_version=expected_version))

    async def reject(self, approval_id: int, *, comment: str,
                     expected_version: int | None = None) -> m.Approval:
        return await self.send(ops.reject(approval_id, comment=comment,
                                          expected_version=expected_version))

    async def questions(self, *, status: str | None = None, task_id: int | None = None,
                        limit: int | None = None, cursor: str | None = None
                        ) -> m.QuestionPage:
        return await self.send(ops.questions(status=status, task_id=task_id, limit=limit,
                                             cursor=cursor))

    async def inbox(self, *, limit: int | None = None) -> m.Inbox:
        return await self.send(ops.inbox(limit=limit))

    # tools and agents (admins)
    async def tools(self) -> list[m.Tool]:
        return await self.send(ops.TOOLS.all())

    async def tool(self, name: str) -> m.Tool:
        return await self.send(ops.TOOLS.one(name))

    async def create_tool(self, name: str, **fields: Any) -> m.Tool:
        return await self.send(ops.TOOLS.create(name, fields))

    async def update_tool(self, name: str, **changes: Any) -> m.Tool:
        return await self.send(ops.TOOLS.update(name, changes))

    async def agents(self) -> list[m.Agent]:
        return await self.send(ops.AGENTS.all())

    async def agent(self, name: str) -> m.Agent:
        return await self.send(ops.AGENTS.one(name))

    async def create_agent(self, name: str, **fields: Any) -> m.Agent:
        return await self.send(ops.AGENTS.create(name, fields))

    async def update_agent(self, name: str, **changes: Any) -> m.Agent:
        return await self.send(ops.AGENTS.update(name, changes))
