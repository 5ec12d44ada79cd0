"""The httpx2 transports of every outbound call: the policy at connect time, a total deadline.

- `PolicyBackend` (httpcore2's network backend) resolves the host, checks
  every address with the outbound-address policy and connects to a checked
  address: a DNS answer that changes between the check and the connection
  (rebinding) cannot redirect the call. TLS still verifies the URL's host
  name (httpcore2 passes it to `start_tls` as the server name).
- A request's timeout is the *whole call's*: the transport turns it into a
  deadline (the largest of its connect/read/write/pool values from now), and
  every socket operation of that request, from connecting to the last byte of
  the body, waits at most what is left of it. httpx2 alone applies the
  timeout to each read, so a server sending a byte every 0.7 s could hold a
  1 s call for as long as it liked.
- Only http and https; redirects are the client's business (never followed
  by the clients of `tools_app.outbound.clients`); no proxy from the environment.

The deadline travels in a context variable that is set only while this
transport is inside httpcore2 for the request (sending, then each read of the
body), so pooled connections, threads and asyncio tasks never see another
request's deadline.
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import anyio
import httpcore2
import httpx2

from .policy import DNS_TIMEOUT_S, SCHEMES, EgressRefusedError, Policy

_deadline: ContextVar[float | None] = ContextVar("tether_outbound_deadline", default=None)

# httpcore2's exceptions as httpx2's (the most specific class first).
_EXCEPTIONS: tuple[tuple[type[Exception], type[httpx2.HTTPError]], ...] = (
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
def _mapped() -> Iterator[None]:
    try:
        yield
    except EgressRefusedError:
        raise
    except Exception as exc:
        for source, target in _EXCEPTIONS:
            if isinstance(exc, source):
                raise target(str(exc)) from exc
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


def _deadline_of(request: httpx2.Request) -> float | None:
    values = [v for v in (request.extensions.get("timeout") or {}).values() if v is not None]
    return time.monotonic() + max(values) if values else None


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


# --- async (the same, on anyio) -------------------------------------------------------


def _readable(sock: socket.socket | None) -> bool:
    """httpcore's probe: an idle keep-alive socket with something to read has
    been closed by the server (no socket, or a closed one: as good as closed)."""
    if sock is None or sock.fileno() == -1:
        return True
    probe = select.poll()
    probe.register(sock.fileno(), select.POLLIN)
    return bool(probe.poll(0))


class _AsyncStream(httpcore2.AsyncNetworkStream):
    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._socket: socket.socket | None = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, _left(timeout, httpcore2.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, _left(timeout, httpcore2.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: ssl.SSLContext, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore2.AsyncNetworkStream:
        return _AsyncStream(await self._inner.start_tls(
            ssl_context, server_hostname, _left(timeout, httpcore2.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # Asked of every idle connection of the pool each time a request
            # starts or ends; anyio builds its attribute table on each lookup,
            # so the socket is looked up once (the readiness probe is the same).
            if self._socket is None:
                self._socket = self._inner.get_extra_info("socket")
            return _readable(self._socket)
        return self._inner.get_extra_info(info)


class AsyncPolicyBackend(httpcore2.AsyncNetworkBackend):
    def __init__(self, policy: Policy) -> None:
        self._policy = policy
        self._inner = httpcore2.AnyIOBackend()

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore2.AsyncNetworkStream:
        left = _left(timeout, httpcore2.ConnectTimeout)
        try:
            with anyio.fail_after(DNS_TIMEOUT_S if left is None else min(left, DNS_TIMEOUT_S)):
                infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                proto=socket.IPPROTO_TCP)
        except TimeoutError:
            raise httpcore2.ConnectTimeout("the host did not resolve in time") from None
        except OSError as exc:
            self._policy.refuse_unresolved(host, port)
            raise httpcore2.ConnectError(f"cannot resolve the host: {exc.strerror or exc}")
        addresses = self._policy.checked(host, port, [str(info[4][0]) for info in infos])
        last: Exception | None = None
        for address in addresses:
            try:
                stream = await self._inner.connect_tcp(
                    address, port, _left(timeout, httpcore2.ConnectTimeout), local_address,
                    socket_options)
            except (httpcore2.ConnectError, httpcore2.ConnectTimeout) as exc:
                last = exc
                continue
            return _AsyncStream(stream)
        assert last is not None
        raise last

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore2.AsyncNetworkStream:
        raise EgressRefusedError()

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _AsyncBody(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, deadline: float | None) -> None:
        self._inner = inner
        self._deadline = deadline

    async def __aiter__(self) -> AsyncIterator[bytes]:
        chunks = self._inner.__aiter__()
        while True:
            with _within(self._deadline), _mapped():
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    return
            yield chunk

    async def aclose(self) -> None:
        with _mapped():
            if hasattr(self._inner, "aclose"):
                await self._inner.aclose()


class AsyncPolicyTransport(httpx2.AsyncBaseTransport):
    def __init__(self, policy: Policy, *, ssl_context: ssl.SSLContext,
                 limits: httpx2.Limits) -> None:
        self._pool = httpcore2.AsyncConnectionPool(network_backend=AsyncPolicyBackend(policy),
                                                   **_pool_options(ssl_context, limits))

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        deadline = _deadline_of(request)
        core = _core_request(request)
        with _within(deadline), _mapped():
            response = await self._pool.handle_async_request(core)
        return _response(response, _AsyncBody(response.stream, deadline))

    async def aclose(self) -> None:
        await self._pool.aclose()
