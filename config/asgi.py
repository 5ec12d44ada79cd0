"""ASGI entry point: HTTP through Django (A2A's `/a2a/` through `a2a_app`),
WebSockets through Channels.

Request bodies are limited before Django reads them (`config.body_limit`).
MCP clients reach `/mcp` (`mcp_server_app.asgi`) before Django, still behind
the body limit; its session manager starts on the first request (daphne sends
no lifespan events) and stops on a lifespan shutdown where there is one.
WebSockets are authenticated by the session and accepted from the site's own
origin only, scheme and port included (`config.ws_origin`). In the
embedded mode the in-process runner is handed the server's event loop when the
server starts, so steps, the recovery sweep and live pushes run on it without
waiting for a first request: on the ASGI lifespan startup (uvicorn,
hypercorn), or when daphne's reactor starts (daphne sends no lifespan
events). See `tasks_app.runner.embedded` for why. Traces (`foundations.tracing`)
start before Django builds its middleware, which the instrumentation extends.
"""
from __future__ import annotations

import asyncio
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

from foundations import tracing  # noqa: E402

tracing.setup("web")  # before Django builds its middleware: the instrumentation adds one

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import path  # noqa: E402

from a2a_app.app import application as a2a_application  # noqa: E402
from config.body_limit import BodyLimit  # noqa: E402
from config.ws_origin import SameOriginValidator  # noqa: E402
from mcp_server_app.asgi import PATHS as MCP_PATHS  # noqa: E402
from mcp_server_app.asgi import endpoint as mcp_endpoint  # noqa: E402
from tasks_app.live.consumers import LiveConsumer  # noqa: E402
from tasks_app.runner.embedded import embedded_runner  # noqa: E402

A2A_PREFIX = "/a2a/"


async def http_application(scope, receive, send):  # type: ignore[no-untyped-def]
    """The A2A server (`a2a_app`, the SDK's Starlette) under /a2a/, the MCP
    endpoint at /mcp; Django for the rest."""
    if scope["path"].startswith(A2A_PREFIX):
        return await a2a_application(scope, receive, send)
    if scope["path"] in MCP_PATHS:
        return await mcp_endpoint(scope, receive, send)
    return await django_asgi(scope, receive, send)


router = ProtocolTypeRouter(
    {
        "http": BodyLimit(http_application),
        "websocket": SameOriginValidator(
            AuthMiddlewareStack(URLRouter([path("ws/live/", LiveConsumer.as_asgi())]))
        ),
    }
)


def _bind_embedded_runner() -> None:
    embedded_runner.bind_loop(asyncio.get_running_loop())


def _bind_when_daphne_starts() -> None:
    """Daphne runs a Twisted asyncio reactor on the loop that serves requests.
    `callWhenRunning` fires as the server starts, just before that loop runs,
    so the binding is queued onto the loop itself. In any other process
    (tests, Celery, a shell) the reactor never runs: a no-op."""
    reactor = sys.modules.get("twisted.internet.reactor")
    loop = getattr(reactor, "_asyncioEventloop", None)
    if reactor is None or loop is None:
        return
    reactor.callWhenRunning(lambda: loop.call_soon(_bind_embedded_runner))


if settings.TETHER_RUNNER == "embedded":
    _bind_when_daphne_starts()


async def application(scope, receive, send):  # type: ignore[no-untyped-def]
    if settings.TETHER_RUNNER == "embedded":
        _bind_embedded_runner()  # a no-op once bound to this loop
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await mcp_endpoint.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return
    return await router(scope, receive, send)
