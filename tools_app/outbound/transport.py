"""The transports of every outbound call: the policy at connect time, a total deadline.

Two transports under httpx2 clients, one rule set:

- `PolicyTransport` (sync: notifications, the console's checks) runs httpcore2
  on `PolicyBackend`, which resolves the host, checks every address with the
  outbound-address policy and connects to a checked address.
- `AsyncPolicyTransport` (the runner's model calls, HTTP tools and status
  queries, hundreds at once on one loop; MCP connections) runs aiohttp:
  `PolicyResolver` resolves and checks every host name, and the transport
  checks an address literal itself (aiohttp never resolves one).

Either way a DNS answer that changes between the check and the connection
(rebinding) cannot redirect the call, and TLS still verifies the URL's host
name. A request's timeout is the *whole call's*: from connecting to the last
byte of the body (httpx2 alone applies it to each read, so a server sending a
byte every 0.7 s could hold a 1 s call for as long as it liked). Only http and
https; redirects are the client's business (never followed by the clients of
`tools_app.outbound.clients`); no proxy from the environment.

In the sync transport the deadline travels in a context variable that is set
only while the transport is inside httpcore2 for the request (sending, then
each read of the body), so pooled connections and threads never see another
request's deadline; aiohttp's own total timeout carries it in the async one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import math
import socket
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

import aiohttp
import httpcore2
import httpx2
import yarl
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.helpers import is_ip_address

from .policy import DNS_TIMEOUT_S, SCHEMES, EgressRefusedError, Policy, alookup

_deadline: ContextVar[float | None] = ContextVar("tether_outbound_deadline", default=None)

# httpcore2's exceptions as httpx2's (the most specific class first).
_EXCEPTIONS: tuple[tuple[type[BaseException], type[httpx2.HTTPError]], ...] = (
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout),
    (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.TimeoutException, httpx2.TimeoutException),
    (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError),
    (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.NetworkError, httpx2.NetworkError),
    (httpcore2.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore2.ProtocolError, httpx2.ProtocolError),
)


@contextlib.contextmanager
def _mapped(table: tuple[tuple[type[BaseException], type[httpx2.HTTPError]], ...] = _EXCEPTIONS
            ) -> Iterator[None]:
    """The library's exceptions as httpx2's, by `table`; httpx2's own (the
    policy's refusal, the resolver's errors) go through as raised."""
    try:
        yield
    except httpx2.HTTPError:
        raise
    except Exception as exc:
        for source, target in table:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__) from exc
        raise


@contextlib.contextmanager
def _within(deadline: float | None) -> Iterator[None]:
    token = _deadline.set(deadline)
    try:
        yield
    finally:
        _deadline.reset(token)


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """`timeout` cut to what is left of the current request's deadline."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise expired("the call's total timeout elapsed")
    return left if timeout is None else min(timeout, left)


def _timeout_s(request: httpx2.Request) -> float | None:
    """The whole call's timeout: the largest of the request's timeout values."""
    values = [v for v in (request.extensions.get("timeout") or {}).values() if v is not None]
    return max(values) if values else None


def _deadline_of(request: httpx2.Request) -> float | None:
    seconds = _timeout_s(request)
    return None if seconds is None else time.monotonic() + seconds


def _core_request(request: httpx2.Request) -> httpcore2.Request:
    if request.url.scheme not in SCHEMES:
        raise httpx2.UnsupportedProtocol(f"only http and https URLs: {request.url.scheme!r}")
    return httpcore2.Request(
        method=request.method,
        url=httpcore2.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                          port=request.url.port, target=request.url.raw_path),
        headers=request.headers.raw,
        content=request.stream,  # type: ignore[arg-type]
        extensions=request.extensions,
    )


def _pool_options(ssl_context: ssl.SSLContext, limits: httpx2.Limits) -> dict[str, Any]:
    return {"ssl_context": ssl_context, "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry}


def _response(response: httpcore2.Response,
              stream: httpx2.SyncByteStream | httpx2.AsyncByteStream) -> httpx2.Response:
    return httpx2.Response(status_code=response.status, headers=response.headers, stream=stream,
                           extensions=response.extensions)


# --- sync ---------------------------------------------------------------------------


class _Stream(httpcore2.NetworkStream):
    """A connection whose every wait is cut to the current request's deadline."""

    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore2.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname,
                                             _left(timeout, httpcore2.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class PolicyBackend(httpcore2.NetworkBackend):
    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._inner = httpcore2.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                    local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore2.NetworkStream:
        try:
            addresses = self._policy.resolve(host, port,
                                             _left(timeout, httpcore2.ConnectTimeout))
        except TimeoutError:
            raise httpcore2.ConnectTimeout("the host did not resolve in time") from None
        except OSError as exc:  # a name the operator allowed (any other is refused)
            raise httpcore2.ConnectError(f"cannot resolve the host: {exc.strerror or exc}")
        last: Exception | None = None
        for address in addresses:
            try:
                stream = self._inner.connect_tcp(
                    address, port, _left(timeout, httpcore2.ConnectTimeout), local_address,
                    socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                last = exc
                continue
            return _Stream(stream)
        assert last is not None
        raise last

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None
                            ) -> httpcore2.NetworkStream:
        raise EgressRefusedError()


class _Body(httpx2.SyncByteStream):
    def __init__(self, inner: Iterable[bytes], deadline: float | None) -> None:
        self._inner = inner
        self._deadline = deadline

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._inner)
        while True:
            with _within(self._deadline), _mapped():
                chunk = next(chunks, None)
            if chunk is None:
                return
            yield chunk

    def close(self) -> None:
        with _mapped():
            close = getattr(self._inner, "close", None)
            if close is not None:
                close()


class PolicyTransport(httpx2.BaseTransport):
    """An httpx2 transport on its own httpcore2 pool behind `PolicyBackend`."""

    def __init__(self, policy: Policy, *, ssl_context: ssl.SSLContext,
                 limits: httpx2.Limits) -> None:
        self._pool = httpcore2.ConnectionPool(network_backend=PolicyBackend(policy),
                                              **_pool_options(ssl_context, limits))

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = _deadline_of(request)
        core = _core_request(request)
        with _within(deadline), _mapped():
            response = self._pool.handle_request(core)
        return _response(response, _Body(response.stream,  # type: ignore[arg-type]
                                         deadline))

    def close(self) -> None:
        self._pool.close()


# --- async: aiohttp under httpx2 ----------------------------------------------------


class PolicyResolver(AbstractResolver):
    """aiohttp's resolver for every host name it connects to: each address the
    name resolves to is checked, and aiohttp connects to those addresses only.
    An address literal never reaches a resolver: the transport checks it."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        try:
            found = await alookup(host, port, DNS_TIMEOUT_S, family)
        except TimeoutError as exc:
            raise httpx2.ConnectTimeout(str(exc)) from None
        except OSError as exc:
            if not (isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_AGAIN):
                self._policy.refuse_unresolved(host, port)  # as `Policy.resolve` decides
            raise httpx2.ConnectError(f"cannot resolve the host: {exc.strerror or exc}") from None
        addresses = self._policy.checked(host, port, found)
        return [{"hostname": host, "host": address, "port": port,
                 "family": socket.AF_INET6 if ":" in address else socket.AF_INET,
                 "proto": socket.IPPROTO_TCP, "flags": socket.AI_NUMERICHOST}
                for address in addresses]

    async def close(self) -> None:
        pass


def _check_literal(policy: Policy, url: yarl.URL) -> None:
    """An address in the URL itself, decided as aiohttp decides it (`is_ip_address`),
    checked by the policy; a form the policy cannot read (`127.1`) is refused."""
    host = url.raw_host or ""
    if is_ip_address(host) and not _literal_allowed(policy, host,
                                                    url.port or SCHEMES[url.scheme]):
        raise EgressRefusedError()


@functools.lru_cache(maxsize=1024)
def _literal_allowed(policy: Policy, host: str, port: int) -> bool:
    """Remembered: the policy is immutable, and an address's ranges do not change
    (`ipaddress` walks its tables at each check, a few percent of a worker's CPU)."""
    try:
        policy.checked(host, port, [host])
    except (EgressRefusedError, ValueError):
        return False
    return True


# aiohttp's exceptions as httpx2's, the most specific first. What fails before the
# request is sent is a connect error or timeout (callers retry any tool then);
# anything later is a read or protocol error: the request may have had its effect.
_AIOHTTP_EXCEPTIONS: tuple[tuple[type[BaseException], type[httpx2.HTTPError]], ...] = (
    (aiohttp.ConnectionTimeoutError, httpx2.ConnectTimeout),
    (aiohttp.ClientConnectorError, httpx2.ConnectError),
    (TimeoutError, httpx2.ReadTimeout),
    (aiohttp.ClientPayloadError, httpx2.ReadError),
    (aiohttp.ServerDisconnectedError, httpx2.RemoteProtocolError),
    (aiohttp.ClientResponseError, httpx2.RemoteProtocolError),
    (aiohttp.InvalidURL, httpx2.UnsupportedProtocol),
    (aiohttp.ClientError, httpx2.ReadError),
)



# The connect phase's own timeout is the call's; the whole call's is this much
# longer, so that a deadline reached while connecting reads as a connect timeout
# (nothing was sent) rather than as a read timeout (it may have had its effect).
CONNECT_FIRST_S = 0.05


class ResponseRefusedError(httpx2.ReadError):
    """A response the client will not read (the connection is closed): a
    tenant chooses where its calls go, and so what comes back."""


class ResponseTooLargeError(ResponseRefusedError):
    """A response body went past its client's limit, as sent or as decoded."""


# The content codings the async transport asks for, and decodes itself so that
# its limit holds on what a body decodes to: a few kilobytes of gzip can decode
# to gigabytes, which a client reading the whole body (the openai SDK) would
# hold at once. A response in any other coding was not asked for: refused.
ACCEPT_ENCODING = "gzip, deflate"
DECODED = frozenset({"gzip", "x-gzip", "deflate"})
DECODE_PIECE = 1 << 20  # bytes decoded at a time, at most
EVENT_ENDS = (b"\n\n", b"\r\n\r\n", b"\r\r")  # a blank line ends a server-sent event
# A request's extension (seconds): its event stream is read at most this often,
# what arrived meanwhile in one piece (see `_AiohttpBody`).
GATHER_EVENTS_S = "tether.gather_events_s"


def _codings(response: aiohttp.ClientResponse) -> list[str]:
    return [c for value in response.headers.getall("Content-Encoding", ())
            for c in (part.strip().lower() for part in value.split(","))
            if c and c != "identity"]


def _event_end(window: bytes, at: int, seps: tuple[bytes, ...] = EVENT_ENDS) -> int | None:
    """Where the first server-sent event to end at or after `at` ends, if one does
    (`seps`: the blank lines to look for)."""
    if len(seps) == 1:
        found = window.find(seps[0], at)
        return None if found < 0 else found + len(seps[0])
    ends = [found + len(sep) for sep in seps if (found := window.find(sep, at)) >= 0]
    return min(ends) if ends else None


class _AiohttpBody(httpx2.AsyncByteStream):
    """A response's body, decoded if need be, never read past `limit`: on the
    whole body, or on each event of an event stream (which may last as long as
    its connection: an MCP server's).

    With `gather_s` (a model's token stream), an event stream is read at most
    that often: after each piece, the next waits `gather_s` (or for the body's
    end, which it never waits for), and takes everything that arrived
    meanwhile. A model sends a small event every few milliseconds; each read
    wakes the whole stack above (the client's body, the event parser), which
    cost a streamed reply more CPU than its events' contents."""

    def __init__(self, response: aiohttp.ClientResponse, done: Callable[[], None],
                 limit: int | None, *, decode: bool = False, gather_s: float = 0.0,
                 deadline: float | None = None) -> None:
        self._response = response
        self._done: Callable[[], None] | None = done
        self._limit = limit
        # zlib or gzip, told by its header (32 +): both are sent as "deflate"
        self._inflate = zlib.decompressobj(32 + zlib.MAX_WBITS) if decode else None
        self._events = response.content_type == "text/event-stream"
        self._read = 0  # since the body's start, or the last event's end
        self._tail = b""  # an event stream's last bytes, for an end split between pieces
        self._gather_s = gather_s if self._events else 0.0
        self._deadline = deadline  # the call's (a gathering wait ends there too)
        self._gathering: asyncio.Future[None] | None = None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        # the call's deadline still runs: aiohttp's total timeout (a deadline
        # passed while gathering is raised by the next read)
        content = self._response.content
        if self._gather_s:
            content.on_eof(self._gathered)
        with _mapped(_AIOHTTP_EXCEPTIONS):
            async for chunk in content.iter_any():
                for piece in self._pieces(chunk):
                    self._count(piece)
                    yield piece
                if self._gather_s and not content.is_eof():
                    await self._gather()
        if self._inflate is not None and (rest := self._inflate.flush()):
            self._count(rest)
            yield rest

    async def _gather(self) -> None:
        """Wait `gather_s`, or until the body ends or the call's deadline."""
        wait = self._gather_s
        if self._deadline is not None:
            wait = min(wait, self._deadline - time.monotonic())
        loop = asyncio.get_running_loop()
        self._gathering = loop.create_future()
        timer = loop.call_later(max(0.0, wait), self._gathered)
        try:
            await self._gathering
        finally:
            timer.cancel()
            self._gathering = None

    def _gathered(self) -> None:
        if self._gathering is not None and not self._gathering.done():
            self._gathering.set_result(None)

    def _count(self, piece: bytes) -> None:
        if self._limit is None:
            return
        if not self._events:
            self._read += len(piece)
            self._check(self._read)
            return
        window = self._tail + piece  # an end split between two pieces is found too
        base = len(self._tail)  # where the piece starts in `window`
        start = base - self._read  # where the open event started (before `window`: < 0)
        seps = EVENT_ENDS if b"\r" in window else EVENT_ENDS[:1]  # LF only: one search
        at = 0
        while (end := _event_end(window, at, seps)) is not None:
            if end > base:  # not one the last piece ended already
                self._check(end - start)
                start = end
            at = end
        self._read, self._tail = len(window) - start, window[-3:]
        self._check(self._read)

    def _check(self, size: int) -> None:
        if self._limit is not None and size > self._limit:
            what = "an event of the response" if self._events else "the response"
            raise ResponseTooLargeError(f"{what} is larger than {self._limit} bytes")

    def _pieces(self, chunk: bytes) -> Iterator[bytes]:
        """`chunk` decoded, at most `DECODE_PIECE` bytes at a time, each counted
        before the next is decoded (one chunk of gzip may decode to gigabytes)."""
        if self._inflate is None:
            yield chunk
            return
        data = chunk
        while data:
            try:
                piece = self._inflate.decompress(data, DECODE_PIECE)
            except zlib.error as exc:
                raise httpx2.DecodingError(f"the response's encoding is broken: {exc}") from exc
            data = self._inflate.unconsumed_tail
            if piece:
                yield piece

    async def aclose(self) -> None:
        self._response.release()  # back to the pool when read to the end, else closed
        done, self._done = self._done, None
        if done is not None:
            done()


class AsyncPolicyTransport(httpx2.AsyncBaseTransport):
    """An httpx2 transport on an aiohttp session (its C parser and asyncio's own
    sockets: the transport's share of a worker's CPU in the I/O benchmark fell
    from 23 % to 12 % against httpcore2 on anyio, py-spy), under the
    same rules as `PolicyTransport`: host names through `PolicyResolver`,
    address literals checked here, the request's timeout the whole call's, no
    redirects, no proxy from the environment, no cookies kept (a client serves
    every tenant calling its endpoint).

    A transport let go by its owner (`retire`, on its loop) closes its session
    once the calls still out on it are done: a session left for the collector
    keeps its sockets open until then, and aiohttp logs it as unclosed."""

    def __init__(self, policy: Policy, *, ssl_context: ssl.SSLContext,
                 limits: httpx2.Limits, max_body: Callable[[], int] | None = None) -> None:
        self._policy = policy
        self._max_body = max_body  # read at each call: the limit of a body, in bytes
        self._ssl_context = ssl_context
        self._limits = limits
        self._session: aiohttp.ClientSession | None = None
        self._out = 0  # calls sent whose response is not closed yet
        self._retired = False
        self._closing: set[asyncio.Task[None]] = set()

    def _open(self) -> aiohttp.ClientSession:
        """The session, made on first use: on the running loop, which it is bound to."""
        if self._session is None:
            connector = aiohttp.TCPConnector(
                resolver=PolicyResolver(self._policy), ssl=self._ssl_context,
                limit=self._limits.max_connections or 0,
                keepalive_timeout=self._limits.keepalive_expiry,
                timeout_ceil_threshold=math.inf)  # timeouts as given, not rounded up
            self._session = aiohttp.ClientSession(
                connector=connector, cookie_jar=aiohttp.DummyCookieJar(), trust_env=False,
                auto_decompress=False, skip_auto_headers=("Content-Type",))
        return self._session

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.scheme not in SCHEMES:
            raise httpx2.UnsupportedProtocol(f"only http and https URLs: {request.url.scheme!r}")
        url = yarl.URL(str(request.url), encoded=True)
        _check_literal(self._policy, url)
        seconds = _timeout_s(request)
        timeout = aiohttp.ClientTimeout(
            total=None if seconds is None else seconds + CONNECT_FIRST_S, connect=seconds)
        deadline = None if seconds is None else time.monotonic() + seconds + CONNECT_FIRST_S
        data: Any
        try:
            data = request.content or None
        except httpx2.RequestNotRead:
            data = request.stream  # sent as it comes, chunked
        headers = [(k, v) for k, v in request.headers.multi_items()
                   if k.lower() != "accept-encoding"]
        headers.append(("Accept-Encoding", ACCEPT_ENCODING))
        session = self._open()
        self._out += 1
        try:
            with _mapped(_AIOHTTP_EXCEPTIONS):
                response = await session.request(
                    request.method, url, headers=headers, data=data,
                    allow_redirects=False, timeout=timeout)
            codings = _codings(response)
            if len(codings) > 1 or (codings and codings[0] not in DECODED):
                response.close()
                raise ResponseRefusedError(
                    f"the response is encoded {', '.join(codings)}, not {ACCEPT_ENCODING}")
        except BaseException:
            self._call_done()
            raise
        raw_headers: Sequence[tuple[bytes, bytes]] = response.raw_headers
        if codings:  # decoded here: its length and coding are no longer the body's
            raw_headers = [(k, v) for k, v in raw_headers
                           if k.lower() not in (b"content-encoding", b"content-length")]
        return httpx2.Response(
            status_code=response.status, headers=raw_headers,
            stream=_AiohttpBody(response, self._call_done,
                                None if self._max_body is None else self._max_body(),
                                decode=bool(codings), deadline=deadline,
                                gather_s=request.extensions.get(GATHER_EVENTS_S) or 0.0),
            extensions={"http_version": b"HTTP/1.1",
                        "reason_phrase": (response.reason or "").encode("latin-1", "replace")})

    def _call_done(self) -> None:
        self._out -= 1
        if self._retired and self._out == 0:
            self._close_session()

    def retire(self) -> None:
        """No new calls are expected (call on the transport's loop): close the
        session now, or when the last call out on it is done. A call that comes
        anyway opens a new session, closed in turn when it is done."""
        self._retired = True
        if self._out == 0:
            self._close_session()

    @property
    def closed(self) -> bool:
        """Retired, and every session it opened has closed."""
        return self._retired and self._session is None and not self._closing

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            closing = asyncio.get_running_loop().create_task(session.close())
            self._closing.add(closing)  # a task nobody holds may be collected mid-way
            closing.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
        if self._closing:
            await asyncio.gather(*self._closing)
