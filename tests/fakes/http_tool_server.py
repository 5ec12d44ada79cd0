"""A local HTTP service for http tools to call: the edge of the process, faked.

A threaded server on 127.0.0.1 with an ephemeral port. Each route answers from
a queue of `Reply`s (the last one repeats) or from a function of the request;
every request is recorded (method, path, headers, JSON body). A reply can be
held until the test releases it, to play a service that accepted a request
and has not answered yet; holds always end after a deadline, and `close`
releases them all.
"""
from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOLD_MAX_S = 15.0


@dataclass
class Reply:
    status: int = 200
    json: Any = None
    body: bytes | None = None  # raw body, instead of `json`
    headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None  # answer only once this is set (or after HOLD_MAX_S)


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any


Responder = Reply | Callable[[Recorded], Reply]


class FakeToolServer:
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.requests: list[Recorded] = []
        self._routes: dict[tuple[str, str], list[Responder]] = {}
        self._holds: list[threading.Event] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        if ssl_context is not None:  # HTTPS, for the outbound TLS tests
            self._server.socket = ssl_context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-tool-server",
                                        daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def on(self, method: str, path: str, *replies: Responder) -> None:
        """Answer `method path` with these replies in turn, the last one from then on.
        A path ending in ``*`` matches every path with that prefix."""
        with self._lock:
            self._routes[(method.upper(), path)] = list(replies)

    def hold(self) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._holds.append(event)
        return event

    def requests_to(self, method: str, path: str) -> list[Recorded]:
        with self._lock:
            return [r for r in self.requests if r.method == method.upper()
                    and (r.path == path or (path.endswith("*") and r.path.startswith(path[:-1])))]

    def close(self) -> None:
        with self._lock:
            for event in self._holds:
                event.set()
        self._server.shutdown()
        self._server.server_close()

    # --- used by the handler ---------------------------------------------------
    def _answer(self, recorded: Recorded) -> Reply:
        with self._lock:
            self.requests.append(recorded)
            queue = self._routes.get((recorded.method, recorded.path))
            if queue is None:
                for (method, path), candidates in self._routes.items():
                    if (method == recorded.method and path.endswith("*")
                            and recorded.path.startswith(path[:-1])):
                        queue = candidates
                        break
            if not queue:
                return Reply(404, {"error": "no such route in the fake"})
            responder = queue.pop(0) if len(queue) > 1 else queue[0]
        return responder(recorded) if callable(responder) else responder


def _handler_for(fake: FakeToolServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            recorded = Recorded(method=self.command, path=self.path,
                                headers={k.lower(): v for k, v in self.headers.items()}, body=body)
            reply = fake._answer(recorded)
            if reply.hold is not None:
                reply.hold.wait(HOLD_MAX_S)
            payload = reply.body if reply.body is not None else json.dumps(reply.json).encode()
            try:
                self.send_response(reply.status)
                if "content-type" not in {name.lower() for name in reply.headers}:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting (a timeout under test)

        do_GET = _serve  # noqa: N815 - http.server's naming
        do_POST = _serve  # noqa: N815

    return Handler
