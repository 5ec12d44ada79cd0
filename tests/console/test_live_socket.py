"""The console's WebSocket at the ASGI level: session authentication, the origin
check, tenant scoping of subscriptions, and the `after` cursor that makes a
reconnect lossless and duplicate-free."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client

from config.asgi import application
from tasks_app.models import Event, Role
from tests.factories import TenantFactory, make_user, submit
from tests.helpers import drive

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _close_thread_connections():  # type: ignore[no-untyped-def]
    """The consumer's and these tests' database calls run on asgiref's executor
    thread; close its connection so the test database can be dropped."""
    yield
    asyncio.run(sync_to_async(connections.close_all)())


def _session_cookie(user: Any) -> str:
    c = Client()
    c.force_login(user)
    return c.cookies[settings.SESSION_COOKIE_NAME].value


async def connect(
    user: Any = None, origin: str = "http://127.0.0.1"
) -> tuple[WebsocketCommunicator, bool]:
    headers = [(b"origin", origin.encode()), (b"host", b"127.0.0.1")]
    if user is not None:
        cookie = await sync_to_async(_session_cookie)(user)
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    ws = WebsocketCommunicator(application, "/ws/live/", headers=headers)
    connected, _ = await ws.connect(timeout=5)
    return ws, connected


async def test_a_socket_needs_a_signed_in_user(world):
    ws, connected = await connect(None)
    assert not connected
    await ws.disconnect()


async def test_a_socket_from_another_origin_is_refused(world):
    ws, connected = await connect(world.users[Role.OPERATOR], origin="https://evil.example")
    assert not connected
    await ws.disconnect()


async def test_subscribing_to_another_tenants_task_is_refused(world):
    task = await sync_to_async(submit)(world.tenant, [{"ask": "?"}])
    other = await sync_to_async(TenantFactory)(name="t-other")
    outsider = await sync_to_async(make_user)(other, Role.REVIEWER)
    ws, connected = await connect(outsider)
    assert connected
    await ws.send_json_to({"type": "subscribe", "task": task.pk, "after": 0})
    assert await ws.receive_json_from(timeout=5) == {
        "type": "error",
        "code": "not_found",
        "task": task.pk,
    }
    assert await ws.receive_nothing(timeout=0.3)
    await ws.disconnect()


async def test_after_replays_only_what_the_client_has_not_seen(world):
    task = await sync_to_async(submit)(world.tenant, [{"ask": "?"}])
    await sync_to_async(drive)(task.pk)
    ids = await sync_to_async(
        lambda: list(Event.objects.filter(task=task).order_by("id").values_list("id", flat=True))
    )()
    assert len(ids) >= 3
    ws, connected = await connect(world.users[Role.OPERATOR])
    assert connected
    await ws.send_json_to({"type": "subscribe", "task": task.pk, "after": ids[0]})
    replayed = []
    while True:
        msg = await ws.receive_json_from(timeout=5)
        if msg["type"] == "subscribed":
            break
        replayed.append(msg["event"]["id"])
    assert replayed == ids[1:]
    assert msg == {"type": "subscribed", "task": task.pk, "last_id": ids[-1]}
    await ws.disconnect()


async def test_events_published_together_reach_the_browser_one_by_one_in_order(world):
    from channels.layers import get_channel_layer

    from tasks_app.live.publish import task_group

    task = await sync_to_async(submit)(world.tenant, [{"ask": "?"}])
    await sync_to_async(drive)(task.pk)
    last = await sync_to_async(
        lambda: Event.objects.filter(task=task).order_by("id").values_list("id", flat=True).last()
    )()
    ws, connected = await connect(world.users[Role.OPERATOR])
    assert connected
    await ws.send_json_to({"type": "subscribe", "task": task.pk, "after": last})
    assert (await ws.receive_json_from(timeout=5))["type"] == "subscribed"

    def event(n: int) -> dict[str, Any]:
        return {"id": last + n, "task_id": task.pk, "type": "step_succeeded", "payload": {}}

    layer = get_channel_layer()
    await layer.group_send(task_group(task.pk),
                           {"type": "tether.events", "events": [event(1), event(2)]})
    # one already delivered, one new: only the new one goes out
    await layer.group_send(task_group(task.pk),
                           {"type": "tether.events", "events": [event(2), event(3)]})

    received = [(await ws.receive_json_from(timeout=5))["event"]["id"] for _ in range(3)]
    assert received == [last + 1, last + 2, last + 3]
    assert await ws.receive_nothing(timeout=0.3)
    await ws.disconnect()
