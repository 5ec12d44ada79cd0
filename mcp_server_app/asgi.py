"""`/mcp`: the MCP endpoint (Streamable HTTP), in front of the SDK's session manager.

Every request carries `Authorization: Bearer <Tether API key>`; without a
live key the answer is a 401 in the API's error shape, before the SDK reads
anything. The caller rides in the scope to the handlers (`server.CALLER`).

The session manager runs *stateless*: each POST is served on its own, so any
web process can serve any request and nothing is lost when one restarts (a
run's state is the task's, in the database). Its task group must run for as
long as the server does. Daphne (what `scripts/start` serves with) sends no
ASGI lifespan events, so it starts on the first request to `/mcp`, on the
server's own event loop, and `stop()` (called on a lifespan shutdown, where
the server sends one) ends it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from channels.db import database_sync_to_async
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from accounts_app.services.accounts import api_key_in_use
from foundations.errors import RETRY_AFTER_S, database_unavailable

from .server import CALLER, caller_of_key, server

PATHS = ("/mcp", "/mcp/")


@database_sync_to_async
def _caller_of(raw: str) -> Any:
    key = api_key_in_use(raw)
    return None if key is None else caller_of_key(key)


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() or None if scheme.lower() == "bearer" else None
    return None


async def _answer(send: Any, status: int, code: str, message: str,
                  headers: list[tuple[bytes, bytes]]) -> None:
    """An HTTP error in the API's error shape, before MCP begins."""
    body = json.dumps({"error": {"code": code, "message": message, "details": {}}})
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers]})
    await send({"type": "http.response.body", "body": body.encode()})


class McpEndpoint:
    def __init__(self) -> None:
        self._manager: StreamableHTTPSessionManager | None = None
        self._ready: asyncio.Event | None = None
        self._runner: asyncio.Task[None] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        raw = _bearer(scope)
        try:
            caller = await _caller_of(raw) if raw else None
        except Exception as exc:
            busy = database_unavailable(exc)
            if busy is None:
                raise
            await _answer(send, 503, busy.code, busy.message,
                          [(b"retry-after", str(RETRY_AFTER_S).encode())])
            return
        if caller is None:
            await _answer(send, 401, "not_authenticated",
                          "Send a Tether API key: Authorization: Bearer <key>.",
                          [(b"www-authenticate", b'Bearer realm="tether"')])
            return
        manager = await self._started()
        await manager.handle_request({**scope, CALLER: caller}, receive, send)

    async def _started(self) -> StreamableHTTPSessionManager:
        if self._manager is None:  # no await before the assignment: one manager per process
            manager = self._manager = StreamableHTTPSessionManager(app=server, stateless=True)
            ready = self._ready = asyncio.Event()

            async def run() -> None:
                try:
                    async with manager.run():
                        ready.set()
                        await asyncio.Event().wait()  # until stop() cancels it
                finally:
                    ready.set()  # (a manager that failed to start fails its requests)

            self._runner = asyncio.get_running_loop().create_task(run())
        assert self._ready is not None
        await self._ready.wait()
        return self._manager

    async def stop(self) -> None:
        if self._runner is not None:
            self._runner.cancel()
            await asyncio.gather(self._runner, return_exceptions=True)


endpoint = McpEndpoint()
