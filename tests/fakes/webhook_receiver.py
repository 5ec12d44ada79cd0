"""A webhook receiver at the edge of the process: a threaded HTTP server on
127.0.0.1 that records every POST as it arrived (raw body bytes, lower-case
headers) and answers each with the next status of its script (the last one
repeats). Receivers in the wild dedupe on `X-Tether-Delivery`; `accepted`
gives what such a receiver kept: the requests it answered 2xx, by delivery id.
`hold_next` makes the next request wait for an answer (a sender that dies
meanwhile never gets one); holds end after `HOLD_MAX_S` or at `close`.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

HOLD_MAX_S = 30.0


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    raw: bytes
    status: int  # what the receiver answered

    @property
    def json(self) -> Any:
        return json.loads(self.raw)

    @property
    def delivery_id(self) -> str:
        return self.headers.get("x-tether-delivery", "")


class WebhookReceiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self._script: list[int] = [200]
        self.retry_after: str | None = None  # sent with every 429 and 5xx answer when set
        self._holds: list[threading.Event] = []
        self.arrived = threading.Event()  # set when a held request came in
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="webhook-receiver", daemon=True)
        self._thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def answer(self, *statuses: int) -> None:
        """Answer the next requests with these statuses in turn, the last one from then on."""
        with self._lock:
            self._script = list(statuses)

    def hold_next(self) -> threading.Event:
        """The next request waits until the returned event is set."""
        release = threading.Event()
        with self._lock:
            self._holds.append(release)
        return release

    def all(self) -> list[Received]:
        with self._lock:
            return list(self.received)

    def accepted(self) -> dict[str, list[Received]]:
        """The 2xx-answered requests, by delivery id (a list: a duplicate shows)."""
        kept: dict[str, list[Received]] = {}
        for r in self.all():
            if 200 <= r.status < 300:
                kept.setdefault(r.delivery_id, []).append(r)
        return kept

    def close(self) -> None:
        with self._lock:
            for release in self._holds:
                release.set()
        self._server.shutdown()
        self._server.server_close()

    def _next_status(self) -> int:
        with self._lock:
            return self._script.pop(0) if len(self._script) > 1 else self._script[0]


def _handler_for(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with receiver._lock:
                hold = receiver._holds.pop(0) if receiver._holds else None
            if hold is not None:
                receiver.arrived.set()
                hold.wait(HOLD_MAX_S)
            status = receiver._next_status()
            with receiver._lock:
                receiver.received.append(Received(
                    path=self.path, headers={k.lower(): v for k, v in self.headers.items()},
                    raw=raw, status=status))
            body = b'{"ok": true}' if status < 400 else b'{"error": "scripted failure"}'
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                if receiver.retry_after is not None and (status == 429 or status >= 500):
                    self.send_header("Retry-After", receiver.retry_after)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender is gone (killed under test)

    return Handler


@pytest.fixture
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()
