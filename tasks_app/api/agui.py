"""A task's stream (`live.stream`) told as AG-UI events (protocol 1.0, the
`ag-ui-protocol` package's types and encoder).

One connection is one AG-UI run of the task's thread (``threadId``
``task-<id>``, ``runId`` ``<id>``): ``RUN_STARTED`` and a ``STATE_SNAPSHOT``
open it; it closes with ``RUN_FINISHED`` (the task succeeded: ``result``;
canceled: a ``cancelled`` outcome; waiting for a person: an ``interrupt``
outcome naming what it waits for) or ``RUN_ERROR`` (the task failed). A
client continues after an interrupt by connecting again with the
``Last-Event-ID`` it saw, once the person has answered.

Each step is a ``STEP_STARTED``/``STEP_FINISHED`` pair (``step 3``); the
reasoning text is a ``TEXT_MESSAGE_*`` message, a tool call
``TOOL_CALL_START/ARGS/END`` (streamed from the model's tokens when the agent
streams, else from the recorded decision) and its outcome ``TOOL_CALL_RESULT``.
The table of the mapping is in the docs (how-to "Stream a run").
"""
from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from ag_ui.core import (
    BaseEvent,
    Interrupt,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from ag_ui.encoder import EventEncoder

from ..live.stream import End, Recorded, StreamItem, Tokens
from ..machine import TaskStatus

PROTOCOL_VERSION = "1.0"
# Events that stop the run for a person, and the interrupt's reason.
WAITS = {"need_approval": "approval", "need_input": "input", "escalated": "person",
         "result_uncertain": "reconciliation"}
FAILURES = frozenset({"fatal_error", "budget_exhausted", "deadline_exceeded"})
TOOL_OUTCOMES = frozenset({"step_succeeded", "step_failed", "reconciled"})

StepLookup = Callable[[int], Awaitable[dict[str, Any]]]  # step_no -> {args, output}
ResultLookup = Callable[[], Awaitable[Any]]


def encode(event: BaseEvent, event_id: int | None = None) -> str:
    """One SSE message; `event_id` (the task event it came from) makes it a resume point."""
    data = EventEncoder().encode(event)
    return f"id: {event_id}\n{data}" if event_id is not None else data


class AguiRun:
    """Turns stream items into AG-UI events; `done` once the run is closed."""

    def __init__(self, task_id: int, *, step: StepLookup, result: ResultLookup) -> None:
        self.task_id = task_id
        self.thread_id, self.run_id = f"task-{task_id}", str(task_id)
        self.lookup_step, self.lookup_result = step, result
        self.step_no = 0
        self.text_id: str | None = None  # the open text message
        self.attempts: dict[int, int] = {}  # step -> the attempt its preview shows
        self.previewed: dict[int, str] = {}  # step -> its tool call id, started from tokens
        self.pending_args: dict[int, str] = {}  # args of a call whose name is not known yet
        self.done = False

    def start(self, status: str) -> list[BaseEvent]:
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self.run_id,
                                protocol_version=PROTOCOL_VERSION),
                self._state(status)]

    async def item(self, item: StreamItem) -> list[BaseEvent]:
        if self.done:
            return []
        if isinstance(item, Tokens):
            return self._tokens(item)
        if isinstance(item, Recorded):
            return await self._recorded(item.event)
        if isinstance(item, End) and item.reason == "terminal":
            return await self._ended(item.status, {})
        return []

    # --- tokens -----------------------------------------------------------------

    def _tokens(self, item: Tokens) -> list[BaseEvent]:
        out = self._enter_step(item.step_no)
        if self.attempts.get(item.step_no) != item.attempt:  # a new attempt: a new preview
            out += self._close_text()
            out += [ToolCallEndEvent(tool_call_id=call_id)
                    for step, call_id in self._previews_of(item.step_no)]
            self.attempts[item.step_no] = item.attempt
        for delta in item.deltas:
            if delta["kind"] == "text" and delta["text"]:
                if self.text_id is None:
                    self.text_id = f"task-{self.task_id}-step-{item.step_no}-{item.attempt}"
                    out.append(TextMessageStartEvent(message_id=self.text_id, role="assistant"))
                out.append(TextMessageContentEvent(message_id=self.text_id, delta=delta["text"]))
            elif delta["kind"] == "tool_call":
                out += self._close_text()
                out += self._call_delta(item, delta)
        return out

    def _call_delta(self, item: Tokens, delta: dict[str, Any]) -> list[BaseEvent]:
        step = item.step_no + int(delta["index"])  # a reply's n-th call is its n-th step
        args = self.pending_args.pop(step, "") + delta["args"]
        if step not in self.previewed:
            if not delta["name"]:
                self.pending_args[step] = args  # the name comes first in practice; wait for it
                return []
            call_id = self.previewed[step] = f"task-{self.task_id}-step-{step}-{item.attempt}"
            out: list[BaseEvent] = [ToolCallStartEvent(tool_call_id=call_id,
                                                       tool_call_name=delta["name"])]
        else:
            out = []
        if args:
            out.append(ToolCallArgsEvent(tool_call_id=self.previewed[step], delta=args))
        return out

    def _previews_of(self, step_no: int) -> list[tuple[int, str]]:
        started = [(s, c) for s, c in self.previewed.items() if s >= step_no]
        for step, _ in started:
            del self.previewed[step]
        return started

    # --- recorded events ----------------------------------------------------------

    async def _recorded(self, event: dict[str, Any]) -> list[BaseEvent]:
        kind, payload = event["type"], event.get("payload") or {}
        step_no = payload.get("step_no") if isinstance(payload.get("step_no"), int) else None
        out: list[BaseEvent] = []
        if step_no is not None:
            out += self._enter_step(step_no)
        if kind in ("decision_recorded", "need_approval") and payload.get("tool"):
            out += await self._tool_call(step_no or 0, payload)
        elif kind in TOOL_OUTCOMES and payload.get("tool") and step_no is not None:
            step = await self.lookup_step(step_no)
            out.append(ToolCallResultEvent(
                message_id=f"task-{self.task_id}-result-{step_no}",
                tool_call_id=self._call_id(step_no),
                content=json.dumps(step.get("output"), default=str)))
        if kind in WAITS:
            out += [*self._close_text(), *self._leave_step(), self._state(payload.get("to", ""))]
            out += self._finish(RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id,
                outcome=RunFinishedInterruptOutcome(interrupts=[Interrupt(
                    id=f"task-{self.task_id}-event-{event['id']}", reason=WAITS[kind],
                    message=payload.get("question") or _wait_message(kind, payload),
                    tool_call_id=(self._call_id(step_no)
                                  if kind == "need_approval" and step_no else None))])))
        elif payload.get("to") in (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELED):
            out += await self._ended(payload["to"], event)
        elif "to" in payload and payload.get("to") != payload.get("from"):
            out.append(self._state(payload["to"]))
        return out

    async def _tool_call(self, step_no: int, payload: dict[str, Any]) -> list[BaseEvent]:
        out = self._close_text()
        call_id = self.previewed.pop(step_no, None)
        if call_id is not None:  # its arguments came as tokens: the call is complete
            return [*out, ToolCallEndEvent(tool_call_id=call_id)]
        step = await self.lookup_step(step_no)
        call_id = self._call_id(step_no)
        reason = str(payload.get("reason") or "")
        if reason and self.attempts.get(step_no) is None:  # not previewed: told here
            message_id = f"task-{self.task_id}-step-{step_no}"
            out += [TextMessageStartEvent(message_id=message_id, role="assistant"),
                    TextMessageContentEvent(message_id=message_id, delta=reason),
                    TextMessageEndEvent(message_id=message_id)]
        return [*out, ToolCallStartEvent(tool_call_id=call_id, tool_call_name=payload["tool"]),
                ToolCallArgsEvent(tool_call_id=call_id,
                                  delta=json.dumps(step.get("args") or {}, default=str)),
                ToolCallEndEvent(tool_call_id=call_id)]

    def _call_id(self, step_no: int) -> str:
        """The id of step `step_no`'s call: its preview's, when it had one."""
        attempt = self.attempts.get(step_no)
        if attempt is None:  # a later call of a previewed reply: that reply's attempt
            earlier = [s for s in self.attempts if s < step_no]
            attempt = self.attempts[max(earlier)] if earlier else None
        suffix = f"-{attempt}" if attempt is not None else ""
        return f"task-{self.task_id}-step-{step_no}{suffix}"

    async def _ended(self, status: str, event: dict[str, Any]) -> list[BaseEvent]:
        payload = event.get("payload") or {}
        out = [*self._close_text(), *self._leave_step(), self._state(status)]
        if status == TaskStatus.SUCCEEDED:
            return out + self._finish(RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id, result=await self.lookup_result()))
        if status == TaskStatus.CANCELED:
            return out + self._finish(RunFinishedEvent(
                thread_id=self.thread_id, run_id=self.run_id,
                outcome=RunFinishedCancelledOutcome()))
        detail = payload.get("detail") or {}
        message = (detail.get("message") if isinstance(detail, dict) else None) or (
            f"the task {status.lower()}: {payload.get('reason') or event.get('type') or status}")
        return out + self._finish(RunErrorEvent(
            message=str(message), code=str(payload.get("reason") or event.get("type") or "failed")))

    # --- framing ------------------------------------------------------------------

    def _enter_step(self, step_no: int) -> list[BaseEvent]:
        if step_no <= self.step_no:
            return []
        out = [*self._close_text(), *self._leave_step()]
        self.step_no = step_no
        return [*out, StepStartedEvent(step_name=f"step {step_no}")]

    def _leave_step(self) -> list[BaseEvent]:
        if not self.step_no:
            return []
        return [StepFinishedEvent(step_name=f"step {self.step_no}")]

    def _close_text(self) -> list[BaseEvent]:
        if self.text_id is None:
            return []
        message_id, self.text_id = self.text_id, None
        return [TextMessageEndEvent(message_id=message_id)]

    def _finish(self, event: BaseEvent) -> list[BaseEvent]:
        self.done = True
        return [event]

    def _state(self, status: str) -> StateSnapshotEvent:
        return StateSnapshotEvent(snapshot={"task_id": self.task_id, "status": status,
                                            "step": self.step_no})


def _wait_message(kind: str, payload: dict[str, Any]) -> str:
    if kind == "need_approval":
        return f"the call of {payload.get('tool', 'a tool')} waits for a reviewer's approval"
    if kind == "result_uncertain":
        return "a tool call's outcome is uncertain: a person reconciles it"
    return "the task waits for a person"
