"""The demo tools.

- ``lookup_order`` (read): an order from the demo store.
- ``issue_refund`` (idempotent write, high risk): one refund row per
  idempotency key, however often it is called.
- ``notify_customer`` (plain write): sends the message, *then* stays busy past
  its timeout, like a provider that accepted the request but never answered.
  ``notification_status`` answers whether key K was delivered.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import IntegrityError

from ..executor.errors import ToolBusinessError
from ..executor.types import ToolContext
from ..models import DemoNotification, DemoOrder, DemoRefund


def lookup_order(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    order = DemoOrder.objects.filter(order_id=args["order_id"]).first()
    if order is None:
        raise ToolBusinessError(
            f"order {args['order_id']} does not exist", details={"code": "not_found"}
        )
    return {
        "order_id": order.order_id,
        "customer": order.customer,
        "email": order.email,
        "amount_cents": order.amount_cents,
        "status": order.status,
    }


def issue_refund(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    order = DemoOrder.objects.filter(order_id=args["order_id"]).first()
    if order is None:
        raise ToolBusinessError(
            f"order {args['order_id']} does not exist", details={"code": "not_found"}
        )
    if args["amount_cents"] > order.amount_cents:
        raise ToolBusinessError(
            "the refund exceeds the order amount",
            details={"code": "amount_too_large", "max": order.amount_cents},
        )
    try:
        refund, _ = DemoRefund.objects.get_or_create(
            idempotency_key=ctx.idempotency_key,
            defaults={
                "order_id": order.order_id,
                "amount_cents": args["amount_cents"],
                "reason": args.get("reason", ""),
            },
        )
    except IntegrityError:  # a concurrent call with the same key won the insert
        refund = DemoRefund.objects.get(idempotency_key=ctx.idempotency_key)
    return {
        "refund_id": f"rf_{refund.pk}",
        "order_id": refund.order_id,
        "amount_cents": refund.amount_cents,
        "status": "refunded",
    }


def notify_customer(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    note = DemoNotification.objects.create(
        idempotency_key=ctx.idempotency_key, customer=args["customer"], message=args["message"]
    )
    # The message is out; the provider now hangs past our timeout (simulated latency).
    time.sleep(settings.TETHER["DEMO_NOTIFY_DELAY_S"])
    return {"notification_id": f"nt_{note.pk}", "delivered": True}


def notification_status(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    note = DemoNotification.objects.filter(idempotency_key=args["idempotency_key"]).first()
    if note is None:
        return {"state": "not_found"}
    return {"state": "succeeded", "result": {"notification_id": f"nt_{note.pk}", "delivered": True}}


LOOKUP_ORDER_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string", "pattern": "^[A-Z0-9-]{1,32}$"}},
    "required": ["order_id"],
    "additionalProperties": False,
}
ISSUE_REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string", "pattern": "^[A-Z0-9-]{1,32}$"},
        "amount_cents": {"type": "integer", "minimum": 1},
        "reason": {"type": "string", "maxLength": 200},
    },
    "required": ["order_id", "amount_cents"],
    "additionalProperties": False,
}
NOTIFY_CUSTOMER_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "string", "minLength": 1, "maxLength": 100},
        "message": {"type": "string", "minLength": 1, "maxLength": 2000},
    },
    "required": ["customer", "message"],
    "additionalProperties": False,
}

DEMO_TOOLS: list[dict[str, Any]] = [
    {
        "name": "lookup_order",
        "description": "Look up an order by id: customer, email, amount and status.",
        "target": "tools_app.demo.tools.lookup_order",
        "args_schema": LOOKUP_ORDER_SCHEMA,
        "side_effect": "read",
        "risk": "low",
        "timeout_s": 5.0,
        "max_retries": 3,
    },
    {
        "name": "issue_refund",
        "description": "Refund (part of) an order. Idempotent per call; needs approval.",
        "target": "tools_app.demo.tools.issue_refund",
        "args_schema": ISSUE_REFUND_SCHEMA,
        "side_effect": "idempotent_write",
        "risk": "high",
        "requires_approval": True,
        "timeout_s": 5.0,
        "max_retries": 3,
    },
    {
        "name": "notify_customer",
        "description": "Send the customer a message. Not idempotent; slow provider.",
        "target": "tools_app.demo.tools.notify_customer",
        "status_tool": "tools_app.demo.tools.notification_status",
        "args_schema": NOTIFY_CUSTOMER_SCHEMA,
        "side_effect": "write",
        "risk": "medium",
        "timeout_s": 1.0,
        "max_retries": 0,
    },
]
