"""The request-body limit at the ASGI edge, before Django reads anything.

Django's ASGI handler reads a whole request body (into memory, then a temporary
file) before any middleware runs, so `config.middleware` can only refuse a body
by its `Content-Length`: a chunked body, which has none, would be read whole.
`BodyLimit` wraps the ASGI application: it refuses a declared length over the
limit at once, and otherwise counts the `http.request` messages as they arrive
and answers 413 as soon as the count passes the limit, without reading the
rest. A body within the limit is handed on to the application unchanged.

The limit is `DATA_UPLOAD_MAX_MEMORY_SIZE` (env `MAX_REQUEST_BYTES`); the API
gets its JSON error shape (`config.api_errors.too_large_body`), other paths a
plain-text 413. A server that buffers the whole body itself before calling the
application (daphne does) still receives it; this stops Django from reading
it again, and a streaming server (uvicorn) from receiving more than the limit.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings

from .api_errors import too_large_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

API_PREFIX = "/api/"


class BodyLimit:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if scope["type"] != "http" or limit is None:
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _too_large(scope, send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client left: let the app see it
                await self.app(scope, _replay([message], receive), send)
                return
            body = message.get("body", b"")
            size += len(body)
            if size > limit:
                await _too_large(scope, send)
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        whole = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        await self.app(scope, _replay([whole], receive), send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # Django's middleware answers that one with a 400
    return None


def _replay(first: list[Message], receive: Receive) -> Receive:
    """A `receive` that gives the messages already read, then the server's own."""
    pending = list(first)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay


async def _too_large(scope: Scope, send: Send) -> None:
    if scope["path"].startswith(API_PREFIX):
        body = json.dumps(too_large_body()).encode()
        content_type = b"application/json"
    else:
        body = b"The request body is too large.\n"
        content_type = b"text/plain; charset=utf-8"
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
