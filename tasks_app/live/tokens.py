"""A decision's tokens, published to its task's group while the model streams.

`LiveTokens` is the runner's `gateway.TokenSink`: the pieces the model sends
are held for `STREAM_TOKEN_WINDOW_MS` (a timer on the I/O loop the call runs
on), then handed, joined, to the batching publisher (`publish.publisher`, a
`deque.append`: no I/O on the model call's path), which sends them as one
`tether.tokens` message. A model sends a piece every few milliseconds; a
send to the channel layer costs several Redis round trips, so a message per
piece would cost the worker more than the decision itself (the bench's
streaming workload, docs/performance). The message, as the WebSocket
consumer and `live.stream` receive it::

    {"type": "tether.tokens", "task_id": 7, "step_no": 3, "attempt": 5, "last": false,
     "deltas": [{"kind": "text", "text": "Looking the order up"},
                {"kind": "tool_call", "index": 0, "name": "lookup_order",
                 "args": "{\\"order_id\\": \\"A-"}]}

`step_no` is the step the decision will be recorded as (a reply's `index`-th
tool call becomes step `step_no + index`); `attempt` the task's model call
that produced the tokens (a retry or the fallback is a new attempt: a reader
starts the step's preview afresh); `last`, the attempt's last message (sent
when the reply is complete or the call failed). Tokens are never stored: once the decision
is recorded its event replaces them, and a lost message costs only a preview.
"""
from __future__ import annotations

import asyncio
from typing import Any

from django.conf import settings

from .publish import TOKENS, merged_deltas, publisher, task_group


class LiveTokens:
    def __init__(self, *, task_id: int, step_no: int, model_calls_so_far: int) -> None:
        self.task_id = task_id
        self.step_no = step_no
        self.attempt = model_calls_so_far
        self.group = task_group(task_id)
        self.window_s = settings.TETHER["STREAM_TOKEN_WINDOW_MS"] / 1000
        self.pending: list[dict[str, Any]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.sent = False  # anything of this attempt handed to the publisher

    def call_started(self) -> None:
        self.finished()  # what the previous attempt said goes out under its number
        self.attempt += 1

    def text(self, delta: str) -> None:
        self._hold({"kind": "text", "text": delta})

    def tool_call(self, index: int, name: str, args_delta: str) -> None:
        self._hold({"kind": "tool_call", "index": index, "name": name, "args": args_delta})

    def finished(self) -> None:
        """The attempt's last tokens, marked `last` (readers then know its preview
        is complete); nothing when it streamed nothing."""
        if self.timer is not None:
            self.timer.cancel()
        if self.sent or self.pending:
            self._flush(last=True)
        self.sent = False

    def _hold(self, delta: dict[str, Any]) -> None:
        self.pending.append(delta)
        if self.timer is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (never the runner's case): at once
                self._flush()
                return
            self.timer = loop.call_later(self.window_s, self._flush)

    def _flush(self, *, last: bool = False) -> None:
        self.timer = None
        if not self.pending and not last:
            return
        deltas, self.pending = merged_deltas(self.pending), []
        self.sent = True
        publisher.send([(self.group, {"type": TOKENS, "task_id": self.task_id,
                                      "step_no": self.step_no, "attempt": self.attempt,
                                      "deltas": deltas, "last": last})])


def step_of(event: dict[str, Any]) -> int:
    """The step an event is about (0: none)."""
    step_no = (event.get("payload") or {}).get("step_no")
    return step_no if isinstance(step_no, int) else 0


def superseded(message: dict[str, Any], decided_step: int) -> bool:
    """Whether a `tether.tokens` message comes after an event of its step was
    given (`decided_step`: the latest step a reader saw an event of): the
    recorded decision, or what became of it, replaces the preview."""
    return message["step_no"] <= decided_step
