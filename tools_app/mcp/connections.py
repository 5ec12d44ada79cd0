"""Long-lived MCP client sessions: one per server per process, on the official SDK.

An MCP session is a conversation (initialize, then requests over one
Streamable HTTP session or one stdio process), so it is kept, not rebuilt per
call: every session of this process lives on one event loop in a daemon
thread (`_Loop`; a forked child starts its own), keyed by the server's
address *and* its rendered headers and the outbound policy, so a rotated
secret or a changed policy opens a new session and never reuses an old one.
At most `MAX_SESSIONS` are kept; the least recently used is closed.

The async functions (`list_tools`, `call_tool`) run on that loop; the sync
wrappers (`list_tools_sync`, `call_tool_sync`) submit them from any thread and
wait. The executor is synchronous today; an asyncio runner can await
`call_tool_async`, which hands the call to the sessions' loop.

Streamable HTTP goes through `tools_app.outbound` (the address policy at every
connection, the total deadline per request, no redirects), with a transport
wrapper (`_Watch`) that records, per call, whether its POST reached the
server: the SDK turns a failed POST into a logged error and a waiter that
never wakes, and Tether must tell "nothing was sent" (safe to retry) from
"sent, no answer" (maybe happened). A call is tagged with a nonce in its
`_meta` for this.

stdio servers are processes the operator lists (`TETHER_MCP_STDIO_SERVERS`,
name → command); a tenant can only name one.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import hashlib
import json
import os
import shlex
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx2
import mcp_types as types
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from ..outbound import (
    EgressRefusedError,
    ResponseRefusedError,
    current_policy,
    owned_async_client,
)

MAX_SESSIONS = 64
NONCE = "tether/call"
# The SDK's own defaults: a request may hold its answer stream open.
HTTP_TIMEOUT = httpx2.Timeout(30.0, read=300.0)
CLOSE_TIMEOUT_S = 5.0
# Answers to a POST that say the server did not act on it (404: it forgot the
# session); any other error status may follow an effect.
NOT_PROCESSED = frozenset({400, 401, 403, 404, 409, 422, 429, 503})

T = TypeVar("T")


@dataclass(frozen=True)
class ServerAddress:
    """Where a server is and how to reach it; `headers` rendered with secrets, never shown."""

    tenant_id: int
    name: str
    url: str = ""
    stdio: str = ""  # a name of TETHER_MCP_STDIO_SERVERS
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def key(self) -> tuple[Any, ...]:
        digest = hashlib.sha256(json.dumps(self.headers).encode()).hexdigest()
        policy = current_policy() if self.url else None
        return (self.tenant_id, self.name, self.url, self.stdio, digest, policy)


class ConnectFailed(Exception):
    """No session: nothing of the call was sent. `refused`: the address policy said no."""

    def __init__(self, message: str, *, refused: bool = False, status: int | None = None) -> None:
        super().__init__(message)
        self.refused = refused
        self.status = status


@dataclass(frozen=True)
class PostFailure:
    """What became of a call's POST when it did not bring an answer."""

    sent: bool  # the request may have reached the server
    message: str
    refused: bool = False
    status: int | None = None


@dataclass(frozen=True)
class CallAnswer:
    """A call's end: the result, a JSON-RPC error from the server, or a transport failure."""

    result: types.CallToolResult | None = None
    error: MCPError | None = None
    failure: PostFailure | None = None
    invalid: str | None = None  # an answer that is not a CallToolResult


# --- stdio commands ---------------------------------------------------------------


def stdio_commands() -> dict[str, list[str]]:
    """`TETHER_MCP_STDIO_SERVERS`: a JSON object, name → command (a string or an argv list)."""
    raw = getattr(settings, "TETHER_MCP_STDIO_SERVERS", "") or "{}"
    try:
        table = json.loads(raw) if isinstance(raw, str) else dict(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"TETHER_MCP_STDIO_SERVERS: not JSON: {exc}") from None
    if not isinstance(table, dict):
        raise ImproperlyConfigured("TETHER_MCP_STDIO_SERVERS: a JSON object, name → command")
    commands = {}
    for name, command in table.items():
        argv = shlex.split(command) if isinstance(command, str) else command
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ImproperlyConfigured(f"TETHER_MCP_STDIO_SERVERS: {name!r}: a command")
        commands[str(name)] = argv
    return commands


# --- watching POSTs -------------------------------------------------------------------


class _Watch(httpx2.AsyncBaseTransport):
    """Records, per tagged call, whether its POST was sent and how it failed."""

    def __init__(self, inner: httpx2.AsyncBaseTransport, connection: _Connection) -> None:
        self._inner = inner
        self._connection = connection

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        nonce = _nonce_of(request) if request.method == "POST" else None
        if nonce is not None:
            self._connection.started(nonce)
        try:
            response = await self._inner.handle_async_request(request)
        except EgressRefusedError as exc:
            self._connection.failed(nonce, PostFailure(sent=False, message=str(exc),
                                                       refused=True))
            raise
        except (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout) as exc:
            self._connection.failed(nonce, PostFailure(sent=False, message=_text(exc)))
            raise
        except httpx2.HTTPError as exc:
            self._connection.failed(nonce, PostFailure(sent=True, message=_text(exc)))
            raise
        if request.method == "POST" and response.status_code >= 400:
            code = response.status_code
            sent = code not in NOT_PROCESSED
            self._connection.failed(nonce, PostFailure(sent=sent, status=code,
                                                       message=f"the server answered {code}"))
        if nonce is not None and isinstance(response.stream, httpx2.AsyncByteStream):
            response.stream = _WatchedBody(response.stream, lambda exc: self._connection.failed(
                nonce, PostFailure(sent=True, message=_text(exc))))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


class _WatchedBody(httpx2.AsyncByteStream):
    """A call's answer refused as it is read (past the response limit) ends the
    call at once; the SDK would only log it, and the call wait for its timeout."""

    def __init__(self, inner: httpx2.AsyncByteStream,
                 refused: Callable[[ResponseRefusedError], None]) -> None:
        self._inner = inner
        self._refused = refused

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except ResponseRefusedError as exc:
            self._refused(exc)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


def _nonce_of(request: httpx2.Request) -> str | None:
    try:
        body = json.loads(request.content)
        return str(body["params"]["_meta"][NONCE])
    except (httpx2.RequestNotRead, ValueError, KeyError, TypeError):
        return None


def _text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


# --- one session ----------------------------------------------------------------------


class _Connection:
    """One session, held open by a task of its own (the SDK's context managers
    must be entered and left by the same task)."""

    def __init__(self, address: ServerAddress) -> None:
        self.address = address
        self.session: ClientSession | None = None
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.broken: PostFailure | None = None  # a failure outside any call: the session is lost
        self.setup_error: BaseException | None = None
        self._waiters: dict[str, asyncio.Future[PostFailure]] = {}
        self._sent: set[str] = set()
        self.task = asyncio.ensure_future(self._hold())

    def watch(self, nonce: str) -> asyncio.Future[PostFailure]:
        future: asyncio.Future[PostFailure] = asyncio.get_running_loop().create_future()
        self._waiters[nonce] = future
        return future

    def forget(self, nonce: str) -> None:
        self._waiters.pop(nonce, None)
        self._sent.discard(nonce)

    def started(self, nonce: str) -> None:
        self._sent.add(nonce)

    def was_sent(self, nonce: str) -> bool:
        return nonce in self._sent

    def failed(self, nonce: str | None, failure: PostFailure) -> None:
        waiter = self._waiters.get(nonce) if nonce else None
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(failure)
            return
        # A POST outside any call (the handshake, a notification) failed: this
        # session cannot be trusted; the next call opens another.
        self.broken = self.broken or failure
        self.ready.set()

    async def _hold(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self.address.stdio:
                    argv = stdio_commands().get(self.address.stdio)
                    if argv is None:
                        raise ConnectFailed("this stdio server is no longer configured")
                    params = StdioServerParameters(command=argv[0], args=argv[1:])
                    errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115
                    read, write = await stack.enter_async_context(stdio_client(params, errlog))
                else:
                    client = owned_async_client(
                        headers=dict(self.address.headers), timeout=HTTP_TIMEOUT,
                        wrap=lambda inner: _Watch(inner, self))
                    await stack.enter_async_context(client)
                    read, write, *_ = await stack.enter_async_context(
                        streamable_http_client(self.address.url, http_client=client))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                self.session = session
                self.ready.set()
                await self.closing.wait()
        except BaseException as exc:  # noqa: BLE001 - reported to whoever waits for the session
            self.setup_error = exc
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.session = None
            self.ready.set()
            for waiter in self._waiters.values():
                if not waiter.done():
                    waiter.set_result(PostFailure(sent=True, message="the connection closed"))

    async def open(self, deadline: float) -> ClientSession:
        """The initialized session, within the deadline; raises `ConnectFailed`."""
        try:
            await asyncio.wait_for(self.ready.wait(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise ConnectFailed("the MCP server did not answer the handshake in time") from None
        if self.session is None or self.broken is not None:
            failure = self.broken
            if failure is not None:
                raise ConnectFailed(failure.message, refused=failure.refused,
                                    status=failure.status)
            cause = _text(self.setup_error or Exception("closed"))
            raise ConnectFailed(f"cannot open the MCP session: {cause}")
        return self.session

    def close(self) -> None:
        self.closing.set()
        if self.session is None and not self.task.done():
            # Still in the handshake, maybe waiting on an answer a failed POST
            # will never bring: cancel it, or the task would never end.
            self.task.cancel()


# --- the pool, on its own loop ------------------------------------------------------------


class _Pool:
    def __init__(self) -> None:
        self._connections: OrderedDict[tuple[Any, ...], _Connection] = OrderedDict()

    def get(self, address: ServerAddress) -> _Connection:
        key = address.key()
        connection = self._connections.get(key)
        if connection is not None and (connection.broken is not None or connection.task.done()):
            self.drop(connection)
            connection = None
        if connection is None:
            connection = self._connections[key] = _Connection(address)
            while len(self._connections) > MAX_SESSIONS:
                _, oldest = self._connections.popitem(last=False)
                oldest.close()
        else:
            self._connections.move_to_end(key)
        return connection

    def drop(self, connection: _Connection) -> None:
        key = connection.address.key()
        if self._connections.get(key) is connection:
            del self._connections[key]
        connection.close()

    async def close_all(self) -> None:
        connections = list(self._connections.values())
        self._connections.clear()
        for connection in connections:
            connection.close()
        if connections:
            await asyncio.wait([c.task for c in connections], timeout=CLOSE_TIMEOUT_S)


class _Loop:
    """The sessions' event loop, in a daemon thread of this process."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.pool = _Pool()
        thread = threading.Thread(target=self.loop.run_forever, name="tether-mcp", daemon=True)
        thread.start()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)


_lock = threading.Lock()
_current: _Loop | None = None


def _loop() -> _Loop:
    global _current
    with _lock:
        if _current is None or _current.pid != os.getpid():  # a forked child has no thread
            _current = _Loop()
        return _current


def _run(make: Callable[[_Pool], Coroutine[Any, Any, T]], wait_s: float) -> T:
    loop = _loop()
    return loop.submit(make(loop.pool)).result(timeout=wait_s)


def close_all() -> None:
    """Close this process's sessions (tests; a worker's shutdown)."""
    if _current is not None and _current.pid == os.getpid():
        _current.submit(_current.pool.close_all()).result(timeout=CLOSE_TIMEOUT_S + 1)


# --- listing and calling --------------------------------------------------------------------


async def _opened(pool: _Pool, connection: _Connection, deadline: float) -> ClientSession:
    try:
        return await connection.open(deadline)
    except ConnectFailed:
        pool.drop(connection)  # the next call starts afresh
        raise


async def list_tools(pool: _Pool, address: ServerAddress, timeout_s: float) -> list[types.Tool]:
    """Every tool the server lists (all pages); raises `ConnectFailed` or `MCPError`."""
    deadline = time.monotonic() + timeout_s
    connection = pool.get(address)
    session = await _opened(pool, connection, deadline)
    tools: list[types.Tool] = []
    cursor: str | None = None
    try:
        for _ in range(100):  # a server paging forever is cut off
            left = max(0.01, deadline - time.monotonic())
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await asyncio.wait_for(session.list_tools(params=params), left)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
    except TimeoutError:
        pool.drop(connection)
        raise ConnectFailed("the MCP server did not list its tools in time") from None
    except MCPError:
        pool.drop(connection)
        raise
    if connection.broken is not None:
        pool.drop(connection)
    return tools


async def call_tool(pool: _Pool, address: ServerAddress, *, tool: str, arguments: dict[str, Any],
                    meta: dict[str, Any], timeout_s: float) -> CallAnswer:
    """One `tools/call`, the whole of it (session included) within `timeout_s`.
    Raises `ConnectFailed` when nothing was sent; a failure after sending is in
    the answer (`failure.sent`)."""
    deadline = time.monotonic() + timeout_s
    connection = pool.get(address)
    session = await _opened(pool, connection, deadline)
    nonce = uuid.uuid4().hex
    watcher = connection.watch(nonce)
    request_meta: types.RequestParamsMeta = {**meta, NONCE: nonce}  # type: ignore[typeddict-item]
    request = types.CallToolRequest(params=types.CallToolRequestParams(
        name=tool, arguments=arguments, _meta=request_meta))
    sending = asyncio.ensure_future(session.send_request(request, types.CallToolResult))
    try:
        left = max(0.0, deadline - time.monotonic())
        waiting: set[asyncio.Future[Any]] = {sending, watcher}
        done, _ = await asyncio.wait(waiting, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        if watcher in done and not sending.done():
            failure = watcher.result()
            if failure.status is None or failure.status == 404:
                pool.drop(connection)
            return CallAnswer(failure=failure)
        if sending in done:
            try:
                return CallAnswer(result=sending.result())
            except MCPError as exc:
                if watcher.done():  # the SDK's stand-in for a failed POST: the cause is ours
                    pool.drop(connection)
                    return CallAnswer(failure=watcher.result())
                return CallAnswer(error=exc)
            except ValueError as exc:  # pydantic: not a CallToolResult
                return CallAnswer(invalid=str(exc)[:500])
        # The deadline passed: with the request out, or never sent (a stuck session).
        pool.drop(connection)
        sent = connection.was_sent(nonce) or bool(address.stdio)
        return CallAnswer(failure=PostFailure(sent=sent, message=f"no answer within {timeout_s}s"))
    finally:
        connection.forget(nonce)
        if not sending.done():
            sending.cancel()


def list_tools_sync(address: ServerAddress, timeout_s: float) -> list[types.Tool]:
    return _run(lambda pool: list_tools(pool, address, timeout_s), timeout_s + CLOSE_TIMEOUT_S)


def call_tool_sync(address: ServerAddress, *, tool: str, arguments: dict[str, Any],
                   meta: dict[str, Any], timeout_s: float) -> CallAnswer:
    return _run(lambda pool: call_tool(pool, address, tool=tool, arguments=arguments, meta=meta,
                                       timeout_s=timeout_s), timeout_s + CLOSE_TIMEOUT_S)


async def call_tool_async(address: ServerAddress, *, tool: str, arguments: dict[str, Any],
                          meta: dict[str, Any], timeout_s: float) -> CallAnswer:
    """For asyncio callers: the call runs on the sessions' loop, awaited from the caller's."""
    loop = _loop()
    future = loop.submit(call_tool(loop.pool, address, tool=tool, arguments=arguments, meta=meta,
                                   timeout_s=timeout_s))
    return await asyncio.wait_for(asyncio.wrap_future(future), timeout_s + CLOSE_TIMEOUT_S)
