"""A decision's tokens, published to its task's group while the model streams.

`LiveTokens` is the runner's `gateway.TokenSink`: each piece the model sends
is handed to the batching publisher (`publish.publisher`, a `deque.append`,
no I/O on the model call's path), which sends everything queued within its
window as one `tether.tokens` message per task (`publish.coalesce` joins the
pieces). The message, as the WebSocket consumer and `live.stream` receive it::

    {"type": "tether.tokens", "task_id": 7, "step_no": 3, "attempt": 5,
     "deltas": [{"kind": "text", "text": "Looking the order up"},
                {"kind": "tool_call", "index": 0, "name": "lookup_order",
                 "args": "{\\"order_id\\": \\"A-"}]}

`step_no` is the step the decision will be recorded as (a reply's `index`-th
tool call becomes step `step_no + index`); `attempt` the task's model call
that produced the tokens (a retry or the fallback is a new attempt: a reader
starts the step's preview afresh). Tokens are never stored: once the decision
is recorded its event replaces them, and a lost message costs only a preview.
"""
from __future__ import annotations

from typing import Any

from .publish import TOKENS, publisher, task_group


class LiveTokens:
    def __init__(self, *, task_id: int, step_no: int, model_calls_so_far: int) -> None:
        self.task_id = task_id
        self.step_no = step_no
        self.attempt = model_calls_so_far
        self.group = task_group(task_id)

    def call_started(self) -> None:
        self.attempt += 1

    def text(self, delta: str) -> None:
        self._send({"kind": "text", "text": delta})

    def tool_call(self, index: int, name: str, args_delta: str) -> None:
        self._send({"kind": "tool_call", "index": index, "name": name, "args": args_delta})

    def finished(self) -> None:
        return  # every piece is with the publisher already; its window sends them

    def _send(self, delta: dict[str, Any]) -> None:
        publisher.send([(self.group, {"type": TOKENS, "task_id": self.task_id,
                                      "step_no": self.step_no, "attempt": self.attempt,
                                      "deltas": [delta]})])


def step_of(event: dict[str, Any]) -> int:
    """The step an event is about (0: none)."""
    step_no = (event.get("payload") or {}).get("step_no")
    return step_no if isinstance(step_no, int) else 0


def superseded(message: dict[str, Any], decided_step: int) -> bool:
    """Whether a `tether.tokens` message comes after an event of its step was
    given (`decided_step`: the latest step a reader saw an event of): the
    recorded decision, or what became of it, replaces the preview."""
    return message["step_no"] <= decided_step
