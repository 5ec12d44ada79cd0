"""The console's WebSocket carries a decision's tokens while the model streams
it (the task page shows them), and stops once the recorded decision is sent;
a tenant-wide subscription gets no tokens. The model is the fake
OpenAI-compatible server, held midway through its stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from accounts_app.models import Role
from tasks_app.machine import TaskStatus
from tasks_app.models import Step
from tests.console.test_live_socket import _close_thread_connections, connect  # noqa: F401
from tests.factories import submit
from tests.fakes.fixtures import (
    openai_agent,
    openai_server,  # noqa: F401 - the fixture
)
from tests.fakes.openai_server import reply
from tests.helpers import drive

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


def _drive_and_close(task_id: int) -> Any:
    try:
        return drive(task_id)
    finally:
        connection.close()  # this thread's: the test database is dropped after


async def _until(ws: Any, predicate: Any, limit: int = 200) -> list[dict[str, Any]]:
    """Messages received until one satisfies `predicate` (that one included)."""
    got = []
    for _ in range(limit):
        msg = await ws.receive_json_from(timeout=30)
        got.append(msg)
        if predicate(msg):
            return got
    raise AssertionError(f"no such message in {limit}: {got}")


async def test_the_task_page_gets_the_tokens_then_the_recorded_decision(world, openai_server):  # noqa: F811
    await sync_to_async(openai_agent)(world.tenant, openai_server, name="llm",
                                      model={"stream": True, "timeout_s": 120})
    openai_server.push(
        reply("Let me look the order up.", tool_calls=[("lookup_order", {"order_id": "A-1"})]),
        reply('{"answer": "with Ada"}'))
    hold = openai_server.hold(after=10)
    task = await sync_to_async(submit)(world.tenant, None, agent="llm", goal="Where is A-1?")
    page, connected = await connect(world.users[Role.OPERATOR])
    tenant_wide, also = await connect(world.users[Role.REVIEWER])
    assert connected and also
    await page.send_json_to({"type": "subscribe", "task": task.pk, "after": 0})
    await _until(page, lambda m: m["type"] == "subscribed")
    await tenant_wide.send_json_to({"type": "subscribe", "tenant": True})
    await _until(tenant_wide, lambda m: m["type"] == "subscribed")

    runner = asyncio.ensure_future(sync_to_async(_drive_and_close, thread_sensitive=False)(task.pk))
    assert await sync_to_async(hold.reached.wait, thread_sensitive=False)(30)
    seen = await _until(page, lambda m: m["type"] == "tokens" and any(
        d["kind"] == "tool_call" for d in m["deltas"]))
    tokens = [m for m in seen if m["type"] == "tokens"]
    assert "".join(d["text"] for m in tokens for d in m["deltas"] if d["kind"] == "text") == (
        "Let me look the order up.")
    assert {(m["task"], m["step_no"]) for m in tokens} == {(task.pk, 1)}
    assert not [m for m in seen if m["type"] == "event" and m["event"]["type"] not in (
        "task_created", "task_started")]
    assert not await sync_to_async(Step.objects.filter(task=task).exists)()

    hold.release()
    assert (await runner).status == TaskStatus.SUCCEEDED
    rest = await _until(page, lambda m: m["type"] == "event"
                        and m["event"]["type"] == "final_accepted")
    decided = next(i for i, m in enumerate(rest) if m["type"] == "event"
                   and m["event"]["type"] == "decision_recorded")
    assert not [m for m in rest[decided:] if m["type"] == "tokens" and m["step_no"] == 1]
    wide = await _until(tenant_wide, lambda m: m["type"] == "event"
                        and m["event"]["type"] == "final_accepted")
    assert not [m for m in wide if m["type"] == "tokens"]
    await page.disconnect()
    await tenant_wide.disconnect()
