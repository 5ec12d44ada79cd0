"""The request-body limit at the ASGI edge, before Django reads anything.

Django's ASGI handler reads a whole request body (into memory, then a temporary
file) before any middleware runs, so `config.middleware` can only refuse a body
by its `Content-Length`: a chunked body, which has none, would be read whole.
`BodyLimit` wraps the ASGI application: it refuses a declared length over the
limit at once, and otherwise counts the `http.request` messages as they arrive
and answers 413 as soon as the count passes the limit, without reading the
rest. A body within the limit is handed on to the application unchanged.

The limit is `DATA_UPLOAD_MAX_MEMORY_SIZE` (env `MAX_REQUEST_BYTES`); the API
gets its JSON error shape (`foundations.api_errors.too_large_body`), other paths a
plain-text 413. A server that buffers the whole body itself before calling the
application (daphne does) still receives it; this stops Django from reading
it again, and a streaming server (uvicorn) from receiving more than the limit.

After the 413 is written, the rest of the body is read and thrown away before
the response ends and the server closes the connection. A server that closes a
socket with unread data in it sends a reset, which makes the client's kernel
discard the answer it had already received: a client that writes its whole body
before reading (urllib, requests) would see a reset, not the 413. The drain is
bounded, `DRAIN_MAX_BYTES` and `DRAIN_MAX_SECONDS`, so a client cannot hold the
connection by sending forever; past either bound the connection is closed as
before. The answer is already on its way when the drain starts, so a client
that reads while it sends has it at once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from django.conf import settings

from foundations.api_errors import too_large_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

API_PREFIX = "/api/"
# How much of a refused body is read and discarded, at most, so that the client
# gets to read the 413 (see above): 64 MiB, or 10 seconds, whichever comes first.
DRAIN_MAX_BYTES = 64 * 1024 * 1024
DRAIN_MAX_SECONDS = 10.0


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
            await _too_large(scope, receive, send, body_pending=True)
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
                await _too_large(
                    scope, receive, send, body_pending=message.get("more_body", False)
                )
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


async def _too_large(scope: Scope, receive: Receive, send: Send, *, body_pending: bool) -> None:
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
    # The whole answer goes out now; the response only ends after the drain.
    await send({"type": "http.response.body", "body": body, "more_body": True})
    # A client that asked `Expect: 100-continue` was not told to continue: it
    # sends no body, so there is nothing to wait for.
    if body_pending and not _expects_continue(scope):
        await _drain(receive)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _expects_continue(scope: Scope) -> bool:
    return any(
        name.lower() == b"expect" and value.strip().lower() == b"100-continue"
        for name, value in scope.get("headers", [])
    )


async def _drain(receive: Receive) -> None:
    """Read and discard the rest of the body, within the bounds above."""
    drained = 0
    try:
        async with asyncio.timeout(DRAIN_MAX_SECONDS):
            while drained <= DRAIN_MAX_BYTES:
                message = await receive()
                if message["type"] != "http.request":  # the client left
                    return
                drained += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return
    except TimeoutError:
        return
