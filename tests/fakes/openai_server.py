"""A scriptable OpenAI-compatible chat-completions server for tests.

A real HTTP server on 127.0.0.1 (a thread of the test process) serving
``POST /v1/chat/completions``. A test queues what it should answer, per model
name or for any model, and reads back every request it received::

    server.push(reply(tool_calls=[("lookup_order", {"order_id": "A-1"})]))
    server.push(error(500), error(500), model="primary")
    server.push(slow(2.0, reply(content="late")))

When nothing is queued for a request, `responder` (if set) answers it, else
the server answers 500 "nothing scripted", so a test that runs out of script
fails loudly.

A request with ``"stream": true`` gets its completion as OpenAI-compatible
Server-Sent Events: the scripted reply cut into chunks (`chunks_of`: the text
a few characters at a time, each tool call's name, then its arguments in
pieces), a usage chunk and ``[DONE]``. `hold` stops the next stream midway
until the test releases it::

    hold = server.hold(after=4)     # the first stream pauses after 4 chunks
    hold.reached.wait(10)           # ... the test looks at what arrived so far
    hold.release()
"""
from __future__ import annotations

import gzip
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeOpenAI", "Hold", "Scripted", "chunks_of", "encoded", "error", "reply", "slow"]

PIECE_CHARS = 4


@dataclass(frozen=True)
class Scripted:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    encoding: str = ""  # "gzip": the body gzipped; any other: labelled so, sent as it is


def encoded(coding: str, then: Scripted) -> Scripted:
    """`then`, with `Content-Encoding: coding` (gzipped for "gzip")."""
    return Scripted(then.status, then.body, then.headers, then.delay_s, encoding=coding)


def reply(content: str | None = None, *, tool_calls: list[tuple[str, Any]] | None = None,
          usage: tuple[int, int] = (10, 5), finish_reason: str | None = None,
          model: str = "", cached: int | None = None) -> Scripted:
    """A completion. A tool call's arguments may be a dict (sent as JSON) or a
    raw string (sent as is, e.g. malformed JSON). `usage` is (prompt, completion)
    tokens; `cached`, the prompt tokens served from the cache."""
    calls = [
        {"id": f"call_{i}", "type": "function",
         "function": {"name": name,
                      "arguments": args if isinstance(args, str) else json.dumps(args)}}
        for i, (name, args) in enumerate(tool_calls or [])
    ]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return Scripted(200, {
        "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": finish_reason or ("tool_calls" if calls else "stop")}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                  "total_tokens": usage[0] + usage[1],
                  **({} if cached is None
                     else {"prompt_tokens_details": {"cached_tokens": cached}})},
    })


def error(status: int, message: str = "scripted error", *,
          headers: dict[str, str] | None = None) -> Scripted:
    return Scripted(status, {"error": {"message": message, "type": "server_error", "code": status}},
                    headers=dict(headers or {}))


def slow(delay_s: float, then: Scripted) -> Scripted:
    """`then`, sent after `delay_s` (the client's timeout should fire first)."""
    return Scripted(then.status, then.body, then.headers, delay_s=delay_s)


def chunks_of(body: dict[str, Any], piece: int = PIECE_CHARS) -> list[dict[str, Any]]:
    """A completion `body` as the chunks a streaming endpoint sends."""
    head = {"id": body.get("id", "chatcmpl-fake"), "object": "chat.completion.chunk",
            "created": body.get("created", 0), "model": body.get("model", "")}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    choice = body["choices"][0]
    message = choice.get("message") or {}
    out = [chunk({"role": "assistant", "content": ""})]
    text = message.get("content") or ""
    out += [chunk({"content": text[i:i + piece]}) for i in range(0, len(text), piece)]
    for index, call in enumerate(message.get("tool_calls") or []):
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                          "function": {"name": call["function"]["name"],
                                                       "arguments": ""}}]}))
        args = call["function"]["arguments"]
        out += [chunk({"tool_calls": [{"index": index,
                                       "function": {"arguments": args[i:i + piece]}}]})
                for i in range(0, len(args), piece)]
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    if body.get("usage"):
        out.append({**head, "choices": [], "usage": body["usage"]})
    return out


class Hold:
    """Pauses the first stream that sends `after` chunks, until `release`."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.reached = threading.Event()  # set when a stream is held
        self._released = threading.Event()
        self._taken = False
        self._lock = threading.Lock()

    def take(self) -> bool:
        """Whether the calling stream is the one held (the first to ask)."""
        with self._lock:
            taken, self._taken = self._taken, True
            return not taken

    def release(self) -> None:
        self._released.set()

    def wait(self, stopping: threading.Event) -> None:
        self.reached.set()
        while not self._released.wait(0.05) and not stopping.is_set():
            pass


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float  # time.monotonic() when it arrived

    @property
    def model(self) -> str:
        return str(self.body.get("model", ""))


class FakeOpenAI:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str | None, deque[Scripted]] = {None: deque()}
        self._stopping = threading.Event()
        self.requests: list[Received] = []
        self.responder: Callable[[Received], Scripted] | None = None
        self._hold: Hold | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai",
                                        daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def push(self, *items: Scripted, model: str | None = None) -> None:
        with self._lock:
            self._queues.setdefault(model, deque()).extend(items)

    def hold(self, after: int) -> Hold:
        """Hold the next stream after `after` chunks (see the module's doc)."""
        self._hold = Hold(after)
        return self._hold

    def pending(self, model: str | None = None) -> int:
        with self._lock:
            return len(self._queues.get(model, ()))

    def close(self) -> None:
        self._stopping.set()  # wakes any slow response still waiting
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, received: Received) -> Scripted:
        with self._lock:
            self.requests.append(received)
            for key in (received.model, None):
                queue = self._queues.get(key)
                if queue:
                    return queue.popleft()
        if self.responder is not None:
            return self.responder(received)
        return error(500, f"fake server: nothing scripted for model {received.model!r}")

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                return

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsed": raw.decode(errors="replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                received = Received(path=self.path, headers=headers, body=body, at=time.monotonic())
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(error(404, f"no route {self.path}"))
                    return
                item = fake._next(received)
                if item.delay_s and fake._stopping.wait(item.delay_s):
                    return
                if body.get("stream") is True and item.status == 200 and not item.encoding:
                    self._stream(item)
                    return
                self._send(item)

            def _stream(self, item: Scripted) -> None:
                """The reply as SSE chunks, the connection closed after `[DONE]`."""
                hold = fake._hold
                held = hold is not None and hold.take()
                self.close_connection = True
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Connection", "close")
                    self.end_headers()
                    for sent, chunk in enumerate(chunks_of(item.body)):
                        if held and sent == hold.after:  # type: ignore[union-attr]
                            hold.wait(fake._stopping)  # type: ignore[union-attr]
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went (a killed worker)

            def _send(self, item: Scripted) -> None:
                data = json.dumps(item.body).encode()
                if item.encoding == "gzip":
                    data = gzip.compress(data)
                try:
                    self.send_response(item.status)
                    self.send_header("Content-Type", "application/json")
                    if item.encoding:
                        self.send_header("Content-Encoding", item.encoding)
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in item.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        return Handler
