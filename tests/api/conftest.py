"""Fixtures for the REST API tests: token-authenticated clients per role, a
second tenant, and tasks brought to each waiting state (or past the context
summary threshold) by the real runner.

The only fake is at the process edge: `hanging_url` is a local TCP socket that
accepts connections and never answers, so an http `write` tool times out and
its step becomes UNCERTAIN (a reconciliation), exactly as with a real provider.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.conf import settings
from django.core.cache import cache
from django.test import override_settings
from rest_framework.test import APIClient

from accounts_app.models import Role, Tenant
from accounts_app.services.accounts import api_key_create
from approvals_app.models import Approval, Question, Reconciliation
from tasks_app.machine import TaskStatus
from tasks_app.models import Task
from tasks_app.services.demo import demo_agent_ensure, demo_tools_ensure
from tests.factories import TenantFactory, ToolFactory, make_user, submit
from tests.fakes.listeners import Hanging
from tests.helpers import drive

REFUND_ARGS = {"order_id": "A-1", "amount_cents": 500, "reason": "damaged"}
# A window of 1 step and a threshold of 2 older ones: `summarized()`'s six lookups
# fold steps 1-2 into summary v1 (after step 3), then 1-4 into v2 (after step 5).
SMALL_CONTEXT = {"CONTEXT_WINDOW_STEPS": 1, "SUMMARY_THRESHOLD_STEPS": 2}
LOOKUPS = [
    {
        "tool": "lookup_order",
        "args": {"order_id": "A-1" if i % 2 else "A-2"},
        "reason": f"look {i}",
        "cites": [f"step:{i - 1}"] if i > 1 else [],
    }
    for i in range(1, 7)
]


def client_for(user: Any) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=user)}")
    return client


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    # `world` makes a user per role with a password; PBKDF2 at full strength
    # costs seconds per test on a shared 2-core machine.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_throttle_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()


@pytest.fixture(scope="session")
def hanging_url() -> Iterator[str]:
    """A URL whose server accepts the connection and never answers."""
    server = Hanging()
    yield server.url("/call")
    server.close()


@dataclass
class Tenancy:
    """One tenant: its users by role, API clients by role, and helpers to make
    tasks in each state through the real services and runner."""

    tenant: Tenant
    users: dict[str, Any]
    hanging_url: str
    clients: dict[str, APIClient] = field(default_factory=dict)

    def client(self, role: str) -> APIClient:
        if role not in self.clients:
            self.clients[role] = client_for(self.users[role])
        return self.clients[role]

    @property
    def requester(self) -> Any:
        return self.users[Role.REQUESTER]

    def created_task(self, **kw: Any) -> Task:
        return submit(self.tenant, [{"final": {"ok": True}}], requester=self.requester, **kw)

    def finished_task(self, script: list[Any] | None = None) -> Task:
        task = submit(self.tenant, script or [{"final": {"ok": True}}], requester=self.requester)
        task = drive(task.pk)
        assert task.status == TaskStatus.SUCCEEDED
        return task

    def waiting_for_input(self) -> tuple[Task, Question]:
        task = submit(
            self.tenant,
            [{"ask": "How much should be refunded?"}, {"final": {"ok": True}}],
            requester=self.requester,
        )
        task = drive(task.pk)
        assert task.status == TaskStatus.WAITING_FOR_INPUT
        return task, Question.objects.get(task=task, status="open")

    def waiting_for_approval(
        self, *, requester: Any = None, agent: str = "support"
    ) -> tuple[Task, Approval]:
        task = submit(
            self.tenant,
            [
                {"tool": "issue_refund", "args": REFUND_ARGS, "reason": "damaged"},
                {"final": {"ok": True}},
            ],
            requester=requester or self.requester,
            agent=agent,
        )
        task = drive(task.pk)
        assert task.status == TaskStatus.WAITING_FOR_APPROVAL
        return task, Approval.objects.get(task=task, status="pending")

    def summarized(self) -> Task:
        """A finished task whose context was summarized twice (v1, then v2)."""
        task = submit(self.tenant, [*LOOKUPS, {"final": {"ok": True}}], requester=self.requester)
        with override_settings(TETHER={**settings.TETHER, **SMALL_CONTEXT}):
            task = drive(task.pk)
        assert task.status == TaskStatus.SUCCEEDED, task.failure_reason
        assert sorted(task.summaries.values_list("version", flat=True)) == [1, 2]
        return task

    def escalated(self) -> Task:
        demo_agent_ensure(self.tenant, name="escalating", on_exhaustion="escalate", max_steps=1)
        task = submit(
            self.tenant,
            [{"invalid": "???"}, {"final": {"ok": True}}],
            agent="escalating",
            requester=self.requester,
        )
        task = drive(task.pk)
        assert task.status == TaskStatus.WAITING_FOR_HUMAN
        return task

    def in_reconciliation(self, *, side_effect: str = "write") -> tuple[Task, Reconciliation]:
        if not self.tenant.tools.filter(name="hang_write").exists():
            ToolFactory(
                tenant=self.tenant,
                name="hang_write",
                kind="http",
                url=self.hanging_url,
                side_effect=side_effect,
                timeout_s=0.3,
                max_retries=0,
                args_schema={"type": "object"},
            )
            demo_agent_ensure(self.tenant, name="recon", tools=["hang_write"], on_exhaustion="fail")
        task = submit(
            self.tenant,
            [{"tool": "hang_write", "args": {"n": 1}}, {"final": {"ok": True}}],
            agent="recon",
            requester=self.requester,
        )
        task = drive(task.pk)
        assert task.status == TaskStatus.WAITING_FOR_RECONCILIATION
        return task, Reconciliation.objects.get(task=task, status="open")


def make_tenancy(name: str, hanging_url: str) -> Tenancy:
    tenant = TenantFactory(name=name)
    demo_tools_ensure(tenant)
    demo_agent_ensure(tenant, on_exhaustion="fail")
    users = {role: make_user(tenant, role) for role in Role.values}
    return Tenancy(tenant=tenant, users=users, hanging_url=hanging_url)


@pytest.fixture
def main(world: Any, hanging_url: str) -> Tenancy:
    """The `world` tenant (demo tools, `support` agent, orders, a user per role)."""
    return Tenancy(tenant=world.tenant, users=world.users, hanging_url=hanging_url)


@pytest.fixture
def other(db: Any, hanging_url: str) -> Tenancy:
    """A second tenant with the same tools, agent name and roles: nothing of it may leak."""
    return make_tenancy("t-other", hanging_url)
