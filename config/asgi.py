"""ASGI entry point: HTTP through Django, WebSockets through Channels.

WebSockets are authenticated by the session and checked for origin. In the
embedded mode the first call hands the server's event loop to the in-process
runner, so steps and live pushes run on it.
"""
from __future__ import annotations

import asyncio
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import path  # noqa: E402

from tasks_app.live.consumers import LiveConsumer  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": django_asgi,
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter([path("ws/live/", LiveConsumer.as_asgi())]))
        ),
    }
)


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    if settings.TETHER_RUNNER == "embedded":
        from tasks_app.runner.embedded import embedded_runner

        embedded_runner.bind_loop(asyncio.get_running_loop())
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    return await router(scope, receive, send)
