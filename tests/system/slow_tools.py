"""Slow downstream tools for crash tests, run by real Celery workers.

Each writes its downstream row first, then blocks until a gate file appears
(with a deadline), so a test can kill the worker while the call is in flight.
The blocking is the simulated downstream itself, not test synchronisation.

- `slow_refund` honours the idempotency key (one DemoRefund per key, however
  often it is called): registered as an `idempotent_write`.
- `slow_notify` does not (a DemoNotification per call): a plain `write`, whose
  status query is the demo's `notification_status`.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from tools_app.executor.types import ToolContext
from tools_app.models import DemoNotification, DemoRefund

GATE_DEADLINE_S = 60.0

SLOW_REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount_cents": {"type": "integer", "minimum": 1},
        "gate": {"type": "string"},
    },
    "required": ["order_id", "amount_cents", "gate"],
    "additionalProperties": False,
}
SLOW_NOTIFY_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "message": {"type": "string"},
        "gate": {"type": "string"},
    },
    "required": ["customer", "message", "gate"],
    "additionalProperties": False,
}


def _wait_for_gate(path: str) -> None:
    deadline = time.monotonic() + GATE_DEADLINE_S
    pause = threading.Event()
    while not os.path.exists(path) and time.monotonic() < deadline:
        pause.wait(0.05)


def slow_refund(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    refund, _ = DemoRefund.objects.get_or_create(
        idempotency_key=ctx.idempotency_key,
        defaults={
            "order_id": args["order_id"],
            "amount_cents": args["amount_cents"],
            "reason": "slow",
        },
    )
    _wait_for_gate(args["gate"])
    return {"refund_id": f"rf_{refund.pk}", "amount_cents": refund.amount_cents}


def slow_notify(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    note = DemoNotification.objects.create(
        idempotency_key=ctx.idempotency_key, customer=args["customer"], message=args["message"]
    )
    _wait_for_gate(args["gate"])
    return {"notification_id": f"nt_{note.pk}", "delivered": True}


def blocking_lookup(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    """Blocks its thread until the gate file named by `EDGE_TEST_GATE` (the
    worker's environment) appears: a python tool that blocks."""
    _wait_for_gate(os.environ["EDGE_TEST_GATE"])
    return {"looked_up": args.get("i")}
