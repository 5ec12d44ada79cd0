"""The console's WebSocket takes whatever a client sends: a frame that is not
JSON, a binary frame, absurd nesting, ids in other digits or out of range.
Each is answered `bad_message`, and the same socket goes on working."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings

from accounts_app.models import Role
from config.asgi import application
from tests.console.test_live_socket import (  # noqa: F401 - an autouse fixture
    _close_thread_connections,
    _session_cookie,
)
from tests.factories import submit

pytestmark = [pytest.mark.asyncio, pytest.mark.django_db(transaction=True)]

BAD_FRAMES = [
    "not json",
    '{"type": "subscribe", "task": "²"}',
    '{"type": "subscribe", "task": "٣"}',
    '{"type": "subscribe", "task": 1e400}',
    '{"type": "subscribe", "task": 1.5}',
    '{"type": "subscribe", "task": true}',
    '{"type": "subscribe", "task": -1}',
    '{"type": "subscribe", "task": 1000000000000000000000000000000}',
    '{"type": "subscribe", "task": 1, "after": "x²"}',
    "[" * 100_000 + "]" * 100_000,
]


async def test_bad_frames_are_bad_messages_and_the_socket_lives_on(world: Any) -> None:
    task = await sync_to_async(submit)(world.tenant, [{"ask": "?"}])
    cookie = await sync_to_async(_session_cookie)(world.users[Role.OPERATOR])
    headers = [(b"origin", b"http://127.0.0.1"), (b"host", b"127.0.0.1"),
               (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode())]
    ws = WebsocketCommunicator(application, "/ws/live/", headers=headers)
    connected, _ = await ws.connect(timeout=5)
    assert connected
    for frame in BAD_FRAMES:
        await ws.send_to(text_data=frame)
        assert await ws.receive_json_from(timeout=5) == {"type": "error", "code": "bad_message"}
    await ws.send_to(bytes_data=b"\x00\xff")
    assert await ws.receive_json_from(timeout=5) == {"type": "error", "code": "bad_message"}

    await ws.send_json_to({"type": "subscribe", "task": str(task.pk), "after": 0})
    first = await ws.receive_json_from(timeout=5)
    assert first["type"] == "event" and first["event"]["type"] == "task_created"
    await ws.disconnect()
