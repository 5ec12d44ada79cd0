"""A streamed chat completion: its chunks told to a `TokenSink` as they arrive,
and assembled into the body the non-streaming endpoint would have returned.

The gateway asks for a stream when the agent's `model` says ``"stream": true``
(`model_settings`). Nothing downstream knows a stream was used: `assemble`
returns the same ``{"choices": [{"message": ..., "finish_reason": ...}],
"usage": ...}`` shape, so the decision is parsed, priced and recorded by the
same code, once, when the reply is complete. What the sink was told is a
preview (the console's and the SSE endpoint's live tokens); a call cut short
(a timeout, a dead worker) leaves nothing but that preview behind.
"""
from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Protocol

# An event ends at a blank line; lines end in LF, CRLF or CR (the SSE format).
_LINE_ENDS = (b"\r\n", b"\r")
# A streamed reply is read at most this often (seconds): a model sends a chunk
# every few milliseconds, and each read wakes the whole stack. The tokens are
# held longer than that before they go live (`STREAM_TOKEN_WINDOW_MS`).
GATHER_S = 0.03


class TokenSink(Protocol):
    """Where a decision's tokens go while they arrive (the runner's is
    `tasks_app.live.tokens.LiveTokens`). Called on the I/O loop, per chunk: it
    must only hand the delta over, never wait."""

    def call_started(self) -> None:
        """A new request (a retry, the fallback): what was told before is void."""

    def text(self, delta: str) -> None:
        """A piece of the reply's text (the reasoning before a tool call, or the answer)."""

    def tool_call(self, index: int, name: str, args_delta: str) -> None:
        """A piece of the `index`-th tool call: its name once known, a piece of its
        JSON arguments."""

    def finished(self) -> None:
        """The reply is complete (or the call failed): send what is still held."""


class NoSink:
    """Tokens nobody watches (a summary, a caller that passed no sink)."""

    def call_started(self) -> None:
        return

    def text(self, delta: str) -> None:
        return

    def tool_call(self, index: int, name: str, args_delta: str) -> None:
        return

    def finished(self) -> None:
        return


class Assembler:
    """Folds chat-completion chunks (``{"choices": [{"delta": ...}]}``) into one
    completion body, telling `sink` each piece as it comes."""

    def __init__(self, sink: TokenSink) -> None:
        self.sink = sink
        self.head: dict[str, Any] = {}
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.chunks = 0

    def add(self, chunk: Any) -> None:
        if not isinstance(chunk, dict):
            return
        self.chunks += 1
        if not self.head:
            self.head = {k: chunk[k] for k in ("id", "created", "model") if k in chunk}
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str) and delta["content"]:
                self.content.append(delta["content"])
                self.sink.text(delta["content"])
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                self._add_call(call)

    def _add_call(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        index = call.get("index", len(self.calls))
        held = self.calls.setdefault(index, {"id": "", "type": "function", "name": "",
                                             "arguments": []})
        if call.get("id"):
            held["id"] = call["id"]
        function = call.get("function") or {}
        name_delta = function.get("name") or ""
        held["name"] += name_delta
        args_delta = function.get("arguments") or ""
        held["arguments"].append(args_delta)
        if name_delta or args_delta:
            self.sink.tool_call(index, held["name"], args_delta)

    def body(self) -> dict[str, Any]:
        """The completion, as the non-streaming endpoint returns it."""
        message: dict[str, Any] = {"role": "assistant",
                                   "content": "".join(self.content) if self.content else None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [
                {"id": held["id"] or f"call_{index}", "type": "function",
                 "function": {"name": held["name"], "arguments": "".join(held["arguments"])}}
                for index, held in sorted(self.calls.items())]
        body: dict[str, Any] = {
            **self.head, "object": "chat.completion",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": self.finish_reason
                         or ("tool_calls" if self.calls else "stop")}],
        }
        if self.usage is not None:
            body["usage"] = self.usage
        return body


async def sse_data(pieces: AsyncIterator[bytes]) -> AsyncIterator[Any]:
    """The JSON `data` of each server-sent event in a body's `pieces`, up to
    ``[DONE]``: one pass over the bytes, where the SDK's decoder takes three
    (bytes to lines, lines to events, events to JSON) and cost a streamed reply
    more CPU than the rest of its call (docs/performance). Events with no data
    (comments, `retry:`) are skipped; a payload that is not JSON raises
    `ValueError`."""
    held = b""
    async for piece in pieces:
        held += piece
        if b"\r" in held:  # CRLF or CR line ends, as LF (a CR last may start a CRLF)
            tail = held[-1:] if held.endswith(b"\r") else b""
            held = held[: len(held) - len(tail)].replace(_LINE_ENDS[0], b"\n").replace(
                _LINE_ENDS[1], b"\n") + tail
        *events, held = held.split(b"\n\n")
        for event in events:
            data = _data_of(event)
            if data is None:
                continue
            if data.startswith(b"[DONE]"):
                return
            yield json.loads(data)


def _data_of(event: bytes) -> bytes | None:
    """The `data:` lines of one event, joined as the format says; None: none."""
    if event.startswith(b"data: ") and b"\n" not in event:  # one line (the usual event)
        return event[6:]
    lines = [line[5:] for line in event.split(b"\n") if line.startswith(b"data:")]
    if not lines:
        return None
    return b"\n".join(line[1:] if line.startswith(b" ") else line for line in lines)
