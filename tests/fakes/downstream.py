"""The services HTTP tools call in the system tests, on a `FakeToolServer`.

- ``POST /lookup``: a read that answers at once (an order, its amount, its
  contacts);
- ``POST /read``: a read that takes `read_latency_s`, recording when each
  call arrived and answered (`intervals`, by the ``order`` argument): calls
  that overlapped at the downstream are seen there, not guessed from timing;
- ``POST /write``: one effect per `Idempotency-Key` however often a key is
  sent; every call counted per key; `latency_s` is the service's own time;
- ``GET /write-status/<key>``: the status query of a plain write.

With `hold`, the answers of ``/write`` and ``/read`` wait until it is set (a
call accepted and not answered yet; the effect of a write is recorded first).
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from tests.fakes.http_tool_server import FakeToolServer, Recorded, Reply


class Downstream:
    def __init__(self, *, latency_s: float = 0.0, read_latency_s: float = 0.0,
                 hold: threading.Event | None = None) -> None:
        self.server = FakeToolServer()
        self.latency_s = latency_s
        self.read_latency_s = read_latency_s
        self.held = hold
        self.calls: Counter[str] = Counter()  # writes per key
        self.effects: dict[str, Any] = {}  # key -> the body that took effect
        self.intervals: dict[str, tuple[float, float]] = {}  # a read's order -> (in, out)
        self._lock = threading.Lock()
        self.server.on("POST", "/lookup", self._lookup)
        self.server.on("POST", "/read", self._read)
        self.server.on("POST", "/write", self._write)
        self.server.on("GET", "/write-status/*", self._status)

    def url(self, path: str) -> str:
        return self.server.url(path)

    def seen_keys(self) -> set[str]:
        with self._lock:
            return set(self.calls)

    def _lookup(self, request: Recorded) -> Reply:
        order = request.body.get("order", "")
        return Reply(200, {"order": order, "amount": int(request.body.get("amount", 0)),
                           "contacts": ["ada", "bob", "cy"], "notes": request.body.get("notes")})

    def _read(self, request: Recorded) -> Reply:
        arrived = time.monotonic()
        if self.read_latency_s:
            time.sleep(self.read_latency_s)  # the service's latency, not a synchronisation
        with self._lock:
            self.intervals[str(request.body.get("order"))] = (arrived, time.monotonic())
        return Reply(200, {"order": request.body.get("order"), "status": "shipped"},
                     hold=self.held)

    def _write(self, request: Recorded) -> Reply:
        key = request.headers["idempotency-key"]
        with self._lock:
            self.calls[key] += 1
            self.effects.setdefault(key, request.body)
            body = self.effects[key]
        if self.latency_s:
            time.sleep(self.latency_s)  # the service's latency, not a synchronisation
        return Reply(200, self._answer(key, body), hold=self.held)

    def _status(self, request: Recorded) -> Reply:
        """The status query of a plain write: did the call with this key happen?"""
        key = request.path.rsplit("/", 1)[1]
        with self._lock:
            body = self.effects.get(key)
        if body is None:
            return Reply(404, {"state": "not_found"})
        return Reply(200, {"state": "succeeded", "result": self._answer(key, body)})

    @staticmethod
    def _answer(key: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"item": body.get("item"), "index": body.get("index"), "row": f"row-{key[:12]}",
                "done": body}
