"""A hostile schema validated by the real server (daphne on the test database)
does not stop it from answering. The issue's pattern `^(a+)+$` against a run
of a's and a `!` backtracks exponentially in Python's `re`, inside C code that
holds the GIL: 27 a's froze the whole server for seconds, and the thousands
sent here would freeze it for good. RE2 matches in linear time."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from accounts_app.models import Role
from accounts_app.services.accounts import api_key_create
from approvals_app.models import Approval
from tasks_app.machine import TaskStatus
from tests.console.server import DaphneServer
from tests.factories import submit
from tests.helpers import drive

pytestmark = pytest.mark.django_db(transaction=True)

CATASTROPHIC = "^(a+)+$"
REFUND_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "amount_cents": {"type": "integer", "minimum": 1},
        "reason": {"type": "string", "pattern": CATASTROPHIC},
    },
    "required": ["order_id", "amount_cents"],
    "additionalProperties": False,
}
HOSTILE_CALLS = 3


def _auth(user: Any) -> dict[str, str]:
    return {"Authorization": f"Token {api_key_create(user=user)}"}


def test_the_server_answers_within_a_second_while_a_hostile_pattern_is_validated(
        world: Any, console_server: DaphneServer) -> None:
    admin, reviewer = _auth(world.users[Role.ADMIN]), _auth(world.users[Role.REVIEWER])
    with httpx.Client(base_url=console_server.url, timeout=30) as http:
        registered = http.patch("/api/v1/tools/issue_refund", json={"args_schema": REFUND_SCHEMA},
                                headers=admin)
        assert registered.status_code == 200, registered.text  # RE2 accepts the pattern

    task = drive(submit(world.tenant, [
        {"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 500,
                                          "reason": "aaaa"}},
        {"final": {"ok": True}},
    ], requester=world.users[Role.REQUESTER]).pk)
    assert task.status == TaskStatus.WAITING_FOR_APPROVAL
    approval = Approval.objects.get(task=task, status="pending")

    # A reviewer's edited arguments are validated by the server, in the request.
    edited = {"order_id": "A-1", "amount_cents": 500, "reason": "a" * 5_000 + "!"}
    answers: list[httpx.Response] = []

    def approve_hostile() -> None:
        answers.append(httpx.post(f"{console_server.url}/api/v1/approvals/{approval.pk}/approve",
                                  json={"args": edited}, headers=reviewer, timeout=60))

    hostile = [threading.Thread(target=approve_hostile) for _ in range(HOSTILE_CALLS)]
    for thread in hostile:
        thread.start()
    # The bound: another request is answered within a second.
    probe = httpx.get(f"{console_server.url}/api/v1/tasks/{task.pk}", headers=admin, timeout=1.0)
    for thread in hostile:
        thread.join(60)

    assert probe.status_code == 200 and probe.json()["id"] == task.pk
    assert len(answers) == HOSTILE_CALLS
    for answer in answers:
        assert answer.status_code == 400, answer.text
        assert any(f"does not match '{CATASTROPHIC}'" in e
                   for e in answer.json()["error"]["details"]["args"])
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_the_server_answers_within_a_second_while_a_huge_unique_items_array_is_validated(
        world: Any, console_server: DaphneServer) -> None:
    """jsonschema checks `uniqueItems` pairwise when the items cannot be sorted
    (objects): 2,000 took 3 s of CPU, the 10,000 sent here (three times at once)
    over a minute each, 30,000 about ten minutes. Hashed canonical JSON does it
    in one pass (tests/tools_app/test_schemas.py bounds the 30,000)."""
    admin, reviewer = _auth(world.users[Role.ADMIN]), _auth(world.users[Role.REVIEWER])
    schema = {**REFUND_SCHEMA, "properties": {
        **REFUND_SCHEMA["properties"], "lines": {"type": "array", "uniqueItems": True}}}
    with httpx.Client(base_url=console_server.url, timeout=30) as http:
        registered = http.patch("/api/v1/tools/issue_refund", json={"args_schema": schema},
                                headers=admin)
        assert registered.status_code == 200, registered.text

    task = drive(submit(world.tenant, [
        {"tool": "issue_refund", "args": {"order_id": "A-1", "amount_cents": 500}},
        {"final": {"ok": True}},
    ], requester=world.users[Role.REQUESTER]).pk)
    approval = Approval.objects.get(task=task, status="pending")
    lines = [{"sku": f"s{i}", "qty": 1} for i in range(10_000)] + [{"qty": 1, "sku": "s0"}]
    edited = {"order_id": "A-1", "amount_cents": 500, "lines": lines}
    answers: list[httpx.Response] = []

    def approve_hostile() -> None:
        answers.append(httpx.post(f"{console_server.url}/api/v1/approvals/{approval.pk}/approve",
                                  json={"args": edited}, headers=reviewer, timeout=60))

    hostile = [threading.Thread(target=approve_hostile) for _ in range(HOSTILE_CALLS)]
    for thread in hostile:
        thread.start()
    probe = httpx.get(f"{console_server.url}/api/v1/tasks/{task.pk}", headers=admin, timeout=1.0)
    for thread in hostile:
        thread.join(60)

    assert probe.status_code == 200 and probe.json()["id"] == task.pk
    assert len(answers) == HOSTILE_CALLS
    for answer in answers:
        assert answer.status_code == 400, answer.text
        (error,) = answer.json()["error"]["details"]["args"]
        assert error.startswith("lines: ") and error.endswith("has non-unique elements")
    assert Approval.objects.get(pk=approval.pk).status == "pending"
