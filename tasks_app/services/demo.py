"""The demo: a tenant with users of every role, the three demo tools, a support
agent and a few tasks that show each kind of human decision."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from accounts_app.models import Role, Tenant
from accounts_app.services.accounts import tenant_create, user_ensure
from foundations.actors import SYSTEM
from tools_app.demo.tools import DEMO_TOOLS
from tools_app.models import DemoOrder, Tool

from ..models import AgentProfile, Task
from .releases import agent_seed
from .tasks import task_submit

DEMO_PASSWORD = "tether-demo"
DEMO_ORDERS = [
    ("A-1001", "Ada Lovelace", "ada@example.com", 4200),
    ("A-1002", "Grace Hopper", "grace@example.com", 1999),
    ("A-1003", "Alan Turing", "alan@example.com", 12500),
]


def demo_tools_ensure(tenant: Tenant) -> None:
    for spec in DEMO_TOOLS:
        Tool.objects.update_or_create(
            tenant=tenant,
            name=spec["name"],
            defaults={k: v for k, v in spec.items() if k != "name"},
        )


def demo_agent_ensure(tenant: Tenant, name: str = "support", **overrides: Any) -> AgentProfile:
    defaults: dict[str, Any] = {
        "description": (
            "Customer support: looks up orders, refunds with approval, notifies customers."
        ),
        "model": {
            "backend": "scripted",
            "name": "scripted",
            "system_prompt": "You are a careful support agent. Refunds need evidence.",
        },
        "tools": [t["name"] for t in DEMO_TOOLS],
        "on_exhaustion": "escalate",
        **overrides,
    }
    return agent_seed(tenant_id=tenant.pk, name=name, defaults=defaults)


DEMO_SCRIPTS: list[tuple[str, list[dict[str, Any]]]] = [
    (
        "Where is order A-1001?",
        [
            {"tool": "lookup_order", "args": {"order_id": "A-1001"}, "reason": "need the order"},
            {"final": {"answer": "Order A-1001 was delivered."}},
        ],
    ),
    (
        "Refund order A-1002: the parcel arrived damaged",
        [
            {"tool": "lookup_order", "args": {"order_id": "A-1002"}},
            {
                "tool": "issue_refund",
                "args": {"order_id": "A-1002", "amount_cents": 1999, "reason": "damaged"},
                "reason": "the customer reported damage; full refund",
            },
            {"final": {"refunded_cents": 1999}},
        ],
    ),
    (
        "Tell Alan Turing his order shipped",
        [
            {
                "tool": "notify_customer",
                "args": {"customer": "Alan Turing", "message": "Your order shipped."},
            },
            {"final": {"notified": True}},
        ],
    ),
    (
        "Refund part of A-1003 if the customer agrees",
        [
            {"ask": "How much should be refunded for A-1003 (in cents)?"},
            {"final": {"acknowledged": True}},
        ],
    ),
]


def seed_demo() -> dict[str, Any]:
    with transaction.atomic():
        tenant = tenant_create(name="demo")
        users = {
            role: user_ensure(tenant=tenant, username=f"{role}", role=role, password=DEMO_PASSWORD)
            for role in Role.values
        }
        for order_id, customer, email, amount in DEMO_ORDERS:
            DemoOrder.objects.update_or_create(
                order_id=order_id,
                defaults={"customer": customer, "email": email, "amount_cents": amount},
            )
        demo_tools_ensure(tenant)
        demo_agent_ensure(tenant)
        other = tenant_create(name="acme")
        user_ensure(
            tenant=other, username="acme-reviewer", role=Role.REVIEWER, password=DEMO_PASSWORD
        )
    created = 0
    if not Task.objects.filter(tenant=tenant).exists():
        for goal, script in DEMO_SCRIPTS:
            task_submit(
                tenant_id=tenant.pk,
                requester_id=users[Role.REQUESTER].pk,
                agent="support",
                goal=goal,
                input={},
                script=script,
                actor=SYSTEM,
            )
            created += 1
    return {
        "tenant": tenant.name,
        "users": sorted(u.username for u in users.values()),
        "password": DEMO_PASSWORD,
        "tasks_created": created,
    }
