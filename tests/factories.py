"""factory_boy factories and setup through the real services."""
from __future__ import annotations

from typing import Any

import factory
import pytest

from accounts_app.models import Role, Tenant
from accounts_app.services.accounts import user_ensure
from foundations.actors import Actor
from tasks_app.models import AgentProfile
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tasks_app.services.tasks import task_submit
from tools_app.models import DemoOrder, Tool

__all__ = [
    "TenantFactory", "ToolFactory", "AgentFactory", "make_user", "submit", "world", "actor_of",
]


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"tenant-{n}")


class ToolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tool

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"tool_{n}")
    kind = "python"
    args_schema = factory.LazyFunction(lambda: {"type": "object"})
    side_effect = "read"
    timeout_s = 2.0
    max_retries = 2


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = AgentProfile

    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"agent-{n}")
    tools = factory.LazyFunction(list)


def make_user(tenant: Tenant, role: str = Role.REQUESTER, username: str | None = None):  # type: ignore[no-untyped-def]
    username = username or f"{tenant.name}-{role}"
    return user_ensure(tenant=tenant, username=username, role=role, password="pw-" + username)


def actor_of(user) -> Actor:  # type: ignore[no-untyped-def]
    return Actor(name=user.username, role=user.membership.role, user_id=user.pk)


def submit(tenant: Tenant, script: list[Any], *, agent: str = "support", goal: str = "test goal",
           requester=None, **kw: Any):  # type: ignore[no-untyped-def]
    from foundations.actors import SYSTEM

    return task_submit(tenant_id=tenant.pk, requester_id=requester.pk if requester else None,
                       agent=agent, goal=goal, input=kw.pop("input", {}), script=script,
                       actor=SYSTEM, **kw).task


@pytest.fixture
def world(db):  # type: ignore[no-untyped-def]
    """A tenant with the demo tools, the `support` agent, orders and one user per role."""
    tenant = TenantFactory(name="t-main")
    demo_tools_ensure(tenant)
    demo_agent_ensure(tenant, on_exhaustion="fail")
    for order_id, amount in (("A-1", 5000), ("A-2", 1200)):
        DemoOrder.objects.update_or_create(order_id=order_id, defaults={
            "customer": "Ada", "email": "ada@example.com", "amount_cents": amount})
    users = {role: make_user(tenant, role) for role in Role.values}

    class World:
        pass

    w = World()
    w.tenant = tenant  # type: ignore[attr-defined]
    w.users = users  # type: ignore[attr-defined]
    return w
