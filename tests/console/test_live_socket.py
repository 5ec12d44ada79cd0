"""The console's WebSocket at the ASGI level: session authentication, the origin
check (scheme, host and port), tenant scoping of subscriptions, the `after`
cursor that makes a reconnect lossless and duplicate-free, and sockets that
close when their user loses access."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.db import connections
from django.test import Client

from accounts_app.models import Role
from config.asgi import application
from tasks_app.models import Event
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
    user: Any = None,
    origin: str | None = "http://127.0.0.1",
    host: str = "127.0.0.1",
    extra: tuple[tuple[bytes, bytes], ...] = (),
) -> tuple[WebsocketCommunicator, bool]:
    headers = [(b"host", host.encode()), *extra]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
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


@pytest.mark.parametrize(
    "origin, host, extra, accepted",
    [
        ("http://127.0.0.1:8000", "127.0.0.1:8000", (), True),
        # the same host name on another port, or over the other scheme
        ("http://127.0.0.1:9999", "127.0.0.1:8000", (), False),
        ("https://127.0.0.1:8000", "127.0.0.1:8000", (), False),
        (None, "127.0.0.1:8000", (), False),
        ("null", "127.0.0.1:8000", (), False),
        # a Host outside ALLOWED_HOSTS is not "the site's own origin"
        ("http://evil.example", "evil.example", (), False),
        # behind a TLS proxy (SECURE_PROXY_SSL_HEADER set below): https is the site's scheme
        ("https://127.0.0.1", "127.0.0.1", ((b"x-forwarded-proto", b"https"),), True),
        ("http://127.0.0.1", "127.0.0.1", ((b"x-forwarded-proto", b"https"),), False),
        # trusted explicitly (CSRF_TRUSTED_ORIGINS below), exactly or by subdomain
        ("https://console.example.com", "127.0.0.1", (), True),
        ("https://eu.tether.example", "127.0.0.1", (), True),
        ("http://eu.tether.example", "127.0.0.1", (), False),
        ("https://console.example.com:8443", "127.0.0.1", (), False),
    ],
)
async def test_the_origin_must_match_scheme_host_and_port(world, settings, origin, host, extra,
                                                           accepted):
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example.com", "https://*.tether.example"]
    ws, connected = await connect(world.users[Role.OPERATOR], origin, host, extra)
    assert connected is accepted
    await ws.disconnect()


async def _subscribed_tenant_wide(user: Any) -> WebsocketCommunicator:
    ws, connected = await connect(user)
    assert connected
    await ws.send_json_to({"type": "subscribe", "tenant": True})
    assert await ws.receive_json_from(timeout=5) == {"type": "subscribed", "tenant": True}
    return ws


async def _closed_code(ws: WebsocketCommunicator, timeout: float) -> int:
    message = await ws.receive_output(timeout=timeout)
    assert message["type"] == "websocket.close", message
    return int(message["code"])


@pytest.mark.parametrize("how", ["membership_revoke", "user_deactivate"])
async def test_a_member_who_loses_access_is_cut_off_at_once(world, how):
    from accounts_app.services import accounts
    from tasks_app.live.publish import tenant_group

    revoked_user, colleague = world.users[Role.OPERATOR], world.users[Role.REVIEWER]
    revoked = await _subscribed_tenant_wide(revoked_user)
    stays = await _subscribed_tenant_wide(colleague)

    await sync_to_async(getattr(accounts, how))(user_id=revoked_user.pk)
    # the re-check is 10 s away: this is the notification after the commit
    assert await _closed_code(revoked, timeout=5) == 4403

    # the colleague's socket still gets the tenant's events
    from channels.layers import get_channel_layer

    event = {"id": 10**9, "task_id": 1, "type": "step_succeeded", "payload": {}}
    await get_channel_layer().group_send(
        tenant_group(world.tenant.pk), {"type": "tether.event", "event": event}
    )
    assert (await stays.receive_json_from(timeout=5))["event"]["id"] == 10**9
    await stays.disconnect()
    await revoked.disconnect()


async def test_a_membership_removed_elsewhere_closes_the_socket_on_the_recheck(world, settings):
    """Deleted without the service (a shell, a raw query): the periodic re-check sees it."""
    from accounts_app.models import Membership

    settings.TETHER = {**settings.TETHER, "LIVE_RECHECK_S": 0.2}
    user = world.users[Role.OPERATOR]
    ws = await _subscribed_tenant_wide(user)
    await sync_to_async(lambda: Membership.objects.filter(user=user).delete())()
    assert await _closed_code(ws, timeout=10) == 4403
    await ws.disconnect()
