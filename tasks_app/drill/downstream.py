"""The drill's own downstream (also the chaos benchmark's): a threaded HTTP
server whose routes the caller switches between behaviours (answer, answer
invalid JSON, answer 500, stall), recording every write's effect, so the
caller can count duplicates. It plays the outside world; Tether reaches it
through the outbound policy like any tenant's tool.

Routes (POST unless said): `/read` and `/json`, reads; `/write`, an
idempotent write (one effect per `Idempotency-Key`); `/note`, a plain write
(every POST is an effect) with its status query `GET /note-status/<key>`;
`/v1/chat/completions`, an OpenAI-compatible model that answers at once with
a final `{"done": true}` (its `stall` mode holds the answer `stall_s`
seconds, past a caller's timeout). A duplicate is a second effect for one
`ref` (the task's own reference in the arguments)."""
from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_PATH = "/v1/chat/completions"


class Downstream:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, seed: int | None = None,
                 stall_s: float = 30.0) -> None:
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self.modes: dict[str, str] = {}  # path -> "ok" | "invalid_json" | "error_500" | "stall"
        self.latency_s = 0.0
        self.latency_range: tuple[float, float] | None = None  # overrides latency_s
        self.stall_s = stall_s
        self.effects: Counter[str] = Counter()  # writes applied, by ref (both kinds)
        self.keys: dict[str, str] = {}  # idempotency key -> ref (idempotent writes)
        self.notes: dict[str, str] = {}  # idempotency key -> ref (plain writes, last POST)
        self.calls: Counter[str] = Counter()  # path -> requests
        self.times: list[tuple[float, str]] = []  # (wall clock, path) of every request
        self._server = ThreadingHTTPServer((host, port), _handler_for(self))
        self._server.daemon_threads = True
        self._server.request_queue_size = 256  # hundreds of tasks call at once
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="drill-downstream")
        self._thread.start()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, advertise: str, path: str) -> str:
        return f"http://{advertise}:{self.port}{path}"

    def set(self, path: str, mode: str) -> None:
        with self._lock:
            self.modes[path] = mode

    def duplicates(self) -> int:
        with self._lock:
            return sum(n - 1 for n in self.effects.values() if n > 1)

    def calls_between(self, path: str, start: float, end: float) -> int:
        with self._lock:
            return sum(1 for at, p in self.times if p == path and start <= at <= end)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _latency(self) -> float:
        with self._lock:
            if self.latency_range:
                return self._rng.uniform(*self.latency_range)
            return self.latency_s

    def answer(self, path: str, key: str, body: Any) -> tuple[int, bytes]:
        with self._lock:
            self.calls[path] += 1
            self.times.append((time.time(), path))
            mode = self.modes.get(path, "ok")
        latency = self._latency()
        if mode == "stall":
            latency = self.stall_s
        if latency:
            time.sleep(latency)  # the downstream's own latency
        if mode == "error_500":
            return 500, b'{"error": "drill: downstream failing"}'
        if mode == "invalid_json":
            return 200, b'{"drill": not json'
        if path == MODEL_PATH:
            return 200, json.dumps(_final_reply()).encode()
        ref = body.get("ref", "") if isinstance(body, dict) else ""
        with self._lock:
            if path == "/write" and key not in self.keys:  # idempotent: one effect per key
                self.keys[key] = ref
                self.effects[ref] += 1
            elif path == "/note":  # a plain write: every POST is an effect
                self.notes[key] = ref
                self.effects[ref] += 1
        return 200, json.dumps({"ref": ref, "ok": True}).encode()

    def note_status(self, key: str) -> tuple[int, bytes]:
        with self._lock:
            self.calls["/note-status"] += 1
            ref = self.notes.get(key)
        if ref is None:
            return 404, b'{"state": "not_found"}'
        return 200, json.dumps({"state": "succeeded",
                                "result": {"ref": ref, "ok": True}}).encode()


def _final_reply() -> dict[str, Any]:
    return {"id": "drill", "object": "chat.completion", "model": "drill",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": '{"done": true}'}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}


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
            self._send(*downstream.answer(
                self.path.split("?")[0], self.headers.get("Idempotency-Key", ""), body))

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.startswith("/note-status/"):
                self._send(*downstream.note_status(self.path.rsplit("/", 1)[1]))
            else:
                self._send(404, b'{"error": "not found"}')

        def _send(self, status: int, payload: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the caller gave up (a timeout, or a killed worker)

    return Handler
