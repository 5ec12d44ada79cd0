"""An agent that issues refunds, on the fake model server, with its two http
tools on a loopback recorder (the downstream): `lookup` (a read) and `refund`
(a write). Version 1 calls the model `primary`, version 2 (the candidate)
`candidate`; what each answers is a plan per model (`Plans`), a function of
how many tool results the conversation holds and the order in the goal."""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.test import TestCase
from rest_framework.test import APIClient

from accounts_app.services.accounts import api_key_create
from evals_app.models import EvaluationTask
from foundations.actors import SYSTEM
from tasks_app.models import AgentProfile, Task
from tasks_app.services.agents import agent_update
from tasks_app.services.tasks import task_submit
from tests.fakes.fixtures import openai_agent
from tests.fakes.http_tool_server import FakeToolServer, Reply
from tests.fakes.openai_server import FakeOpenAI, Received, Scripted, reply
from tests.helpers import drive
from tools_app.services import tool_create

ORDER = re.compile(r"order (\S+)")
Plan = Callable[[int, str], Scripted]  # (tool results so far, order id) -> the reply


def refunding(amount: int = 5, *, lookup_of: Callable[[str], str] = lambda o: o) -> Plan:
    """Look the order up, refund it, answer: the refund agent's usual plan."""
    def plan(done: int, order: str) -> Scripted:
        if done == 0:
            return reply(tool_calls=[("lookup", {"order_id": lookup_of(order)})])
        if done == 1:
            return reply(tool_calls=[("refund", {"order_id": order, "amount": amount})])
        return reply(json.dumps({"refunded": order, "amount": amount}))
    return plan


@dataclass
class Refunds:
    tenant: Any
    admin: Any
    operator: Any
    server: FakeOpenAI
    downstream: FakeToolServer
    agent: AgentProfile
    plans: dict[str, Plan] = field(default_factory=dict)

    def answer(self, received: Received) -> Scripted:
        messages = received.body.get("messages") or []
        done = sum(1 for m in messages if m.get("role") == "tool")
        text = " ".join(str(m.get("content") or "") for m in messages if m.get("role") == "user")
        match = ORDER.search(text)
        return self.plans[received.model](done, match.group(1) if match else "")

    def record(self, *orders: str) -> list[Task]:
        """Live tasks of the current version (1), run to their end."""
        tasks = []
        for order in orders:
            task = task_submit(tenant_id=self.tenant.pk, requester_id=None, agent="refunder",
                               goal=f"Refund order {order}", actor=SYSTEM).task
            tasks.append(drive(task.pk))
        return tasks

    def client(self, user: Any) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_key_create(user=user)}")
        return client

    def downstream_calls(self) -> int:
        return len(self.downstream.requests)


def evaluate(refunds: Refunds, *, scorer: str = "exact", live_reads: bool = False,
             tasks: dict[str, Any] | None = None, expect: int = 201) -> dict[str, Any]:
    """Start an evaluation of version 2 through the API, run its shadow tasks to
    their end in this process, and read it back."""
    client = refunds.client(refunds.operator)
    response = client.post("/api/v1/evaluations", {
        "agent": "refunder", "candidate_version": 2, "scorer": scorer,
        "live_reads": live_reads, "tasks": tasks or {"filter": {"status": ["SUCCEEDED"]}},
    }, format="json")
    assert response.status_code == expect, response.content
    if expect != 201:
        return response.json()
    evaluation_id = response.json()["id"]
    # the test's transaction never commits: run what would follow each commit
    # (the task-end hook that settles a replay) as it is registered
    with TestCase.captureOnCommitCallbacks(execute=True):
        for row in EvaluationTask.objects.filter(evaluation_id=evaluation_id):
            drive(row.shadow_task_id)
    body = client.get(f"/api/v1/evaluations/{evaluation_id}").json()
    body["replays"] = client.get(f"/api/v1/evaluations/{evaluation_id}/tasks").json()["results"]
    return body


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def refunds(world: Any) -> Iterator[Refunds]:
    server, downstream = FakeOpenAI(), FakeToolServer()
    downstream.on("POST", "/lookup", lambda r: Reply(200, {"order_id": r.body["order_id"],
                                                           "amount": 5, "status": "damaged"}))
    downstream.on("POST", "/refund", lambda r: Reply(200, {"refund_id": "R-"
                                                           + r.body["order_id"]}))
    try:
        for name, effect in (("lookup", "read"), ("refund", "write")):
            tool_create(tenant_id=world.tenant.pk, name=name, kind="http",
                        url=downstream.url(f"/{name}"), side_effect=effect, max_retries=0)
        agent = openai_agent(world.tenant, server, name="refunder", tools=["lookup", "refund"])
        agent_update(tenant_id=world.tenant.pk, name="refunder", changes={
            "model": {**agent.model, "name": "candidate"}})  # version 2: saved, not released
        state = Refunds(tenant=world.tenant, admin=world.users["admin"],
                        operator=world.users["operator"], server=server, downstream=downstream,
                        agent=AgentProfile.objects.get(pk=agent.pk),
                        plans={"primary": refunding()})
        server.responder = state.answer
        yield state
    finally:
        server.close()
        downstream.close()
