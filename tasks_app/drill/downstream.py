"""The drill's own downstream: a threaded HTTP server whose routes the drill
switches between behaviours (answer, answer invalid JSON, answer 500, be
slow), recording every write's effect per idempotency key, so the drill can
count duplicates. It plays the outside world; Tether reaches it through the
outbound policy like any tenant's tool."""
from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Downstream:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.Lock()
        self.modes: dict[str, str] = {}  # path -> "ok" | "invalid_json" | "error_500"
        self.latency_s = 0.0
        self.effects: Counter[str] = Counter()  # idempotent writes applied, by ref
        self.keys: dict[str, str] = {}  # idempotency key -> ref
        self.calls: Counter[str] = Counter()  # path -> requests
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="drill-downstream")
        self._thread.start()

    def url(self, advertise: str, path: str) -> str:
        return f"http://{advertise}:{self._server.server_address[1]}{path}"

    def set(self, path: str, mode: str) -> None:
        with self._lock:
            self.modes[path] = mode

    def duplicates(self) -> int:
        with self._lock:
            return sum(n - 1 for n in self.effects.values() if n > 1)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, key: str, body: Any) -> tuple[int, bytes]:
        with self._lock:
            self.calls[path] += 1
            mode = self.modes.get(path, "ok")
            latency = self.latency_s
        if latency:
            time.sleep(latency)  # the downstream's own latency
        if mode == "error_500":
            return 500, b'{"error": "drill: downstream failing"}'
        if mode == "invalid_json":
            return 200, b'{"drill": not json'
        ref = body.get("ref", "") if isinstance(body, dict) else ""
        if path == "/write":
            with self._lock:
                if key not in self.keys:  # idempotent: one effect per key
                    self.keys[key] = ref
                    self.effects[ref] += 1
        return 200, json.dumps({"ref": ref, "ok": True}).encode()


def _handler_for(downstream: Downstream) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                body = None
            status, payload = downstream.answer(
                self.path, self.headers.get("Idempotency-Key", ""), body)
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller gave up (a timeout, or a killed worker)

    return Handler
