"""A downstream order service for http tools, recording concurrency per resource.

Served by a `FakeToolServer` route (`POST /refund`). Each request records its
order, its `Idempotency-Key` and its `X-Tether-Fence`; the effect (a refund) is
written on arrival, once per key (the service honours keys), so a call whose
caller died mid-call has happened. The answer comes when another request is in
flight at the same time or after `PEER_WAIT_S`, whichever is first: calls that
may run in parallel do overlap, and a serialised call costs at most that wait.
`hold()` makes the next request wait until the test releases it (a call in
flight when its worker is killed).
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.http_tool_server import HOLD_MAX_S, FakeToolServer, Recorded, Reply

PEER_WAIT_S = 1.0


@dataclass
class OrderDownstream:
    in_flight: Counter[str] = field(default_factory=Counter)
    max_in_flight: Counter[str] = field(default_factory=Counter)
    overall: int = 0
    max_overall: int = 0
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)  # per idempotency key
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (order, key, fence)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _holds: list[threading.Event] = field(default_factory=list)

    def serve(self, server: FakeToolServer) -> str:
        server.on("POST", "/refund", self._refund)
        server.on("GET", "/refund-status/*", lambda r: Reply(200, {"state": "unknown"}))
        return server.url("/refund")

    def hold_next(self) -> threading.Event:
        event = threading.Event()
        with self._cond:
            self._holds.append(event)
        return event

    def calls_with(self, key: str) -> int:
        with self._cond:
            return sum(1 for _, k, _ in self.calls if k == key)

    def _refund(self, recorded: Recorded) -> Reply:
        body = recorded.body if isinstance(recorded.body, dict) else {}
        order = str(body.get("order_id"))
        key = recorded.headers.get("idempotency-key", "")
        with self._cond:
            self.calls.append((order, key, recorded.headers.get("x-tether-fence", "")))
            self.effects.setdefault(key, {"order_id": order,
                                          "amount_cents": body.get("amount_cents")})
            hold = self._holds.pop(0) if self._holds else None
            self.in_flight[order] += 1
            self.overall += 1
            self.max_in_flight[order] = max(self.max_in_flight[order], self.in_flight[order])
            self.max_overall = max(self.max_overall, self.overall)
            self._cond.notify_all()
            self._cond.wait_for(lambda: self.overall >= 2, timeout=PEER_WAIT_S)
        if hold is not None:
            hold.wait(HOLD_MAX_S)
        with self._cond:
            self.in_flight[order] -= 1
            self.overall -= 1
        return Reply(200, {"refund_id": f"rf_{key[:8]}", "order_id": order})
