"""Long-lived outbound HTTP clients: one per endpoint (scheme, host, port) per process.

Building an httpx2 client costs about 30 ms of CPU (its SSL context); a call
costs far less. So every outbound call for a tenant (HTTP tools, status
queries, model endpoints) takes its client from here: a connection pool with
keep-alive per endpoint, one SSL context for the process, the outbound-address
policy and the total deadline of `transport`, redirects never followed, no
proxy or certificate settings from the environment. Callers pass their own
timeout per request; it bounds the whole call.

Certificates are checked against the default trust store, plus the CAs of
`TETHER_EGRESS_CA_BUNDLE` (a PEM file) for internal services behind a private CA.

Thread-safe. A forked child (a prefork Celery worker) starts with no clients,
and a change of the policy (tests change the setting) starts new ones, so a
pooled connection never outlives the policy it was checked under. At most
`MAX_ENDPOINTS` clients are kept, the least recently used are let go (not
closed: a thread may still be using one; they close when collected).
`async_client_for` is the same for asyncio code (on aiohttp), one client per
endpoint per event loop, reading no response past `max_response_bytes()`; one
let go (evicted, or its policy replaced) closes its connections once its calls
still out are done (`AsyncPolicyTransport.retire`). `astream` sends one
request through the same endpoint's transport without the client's layers
(HTTP tools and status queries: hundreds a second per worker).

No client keeps cookies: one client serves every tenant that calls its
endpoint, and a cookie one tenant's call was given must not go out with
another's.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import functools
import http.cookiejar
import os
import ssl
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx2
from django.conf import settings

from .policy import Policy, current_policy, endpoint_of
from .transport import AsyncPolicyTransport, PolicyTransport

MAX_ENDPOINTS = 512
DEFAULT_TIMEOUT = httpx2.Timeout(30.0)  # callers pass their own, per request
LIMITS = httpx2.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=30.0)
# An async client carries all of a process's calls to its endpoint, hundreds at
# once: aiohttp keeps every idle connection (up to the limit) for 30 s.
ASYNC_LIMITS = httpx2.Limits(max_connections=1000, keepalive_expiry=30.0)

T = TypeVar("T")


class _KeepNoCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: object) -> bool:
        return False


def _no_cookies() -> http.cookiejar.CookieJar:
    """A jar that never stores what a response sets (each client has its own)."""
    return http.cookiejar.CookieJar(policy=_KeepNoCookies())


class Registry(Generic[T]):
    """A thread-safe, bounded map of long-lived objects built on first use;
    `on_drop(item)` for each item evicted to keep the bound."""

    def __init__(self, limit: int = MAX_ENDPOINTS,
                 on_drop: Callable[[T], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._items: OrderedDict[Hashable, T] = OrderedDict()
        self._limit = limit
        self._on_drop = on_drop

    def get(self, key: Hashable, build: Callable[[], T]) -> T:
        dropped: list[T] = []
        with self._lock:
            item = self._items.get(key)
            if item is None:
                item = self._items[key] = build()
                while len(self._items) > self._limit:
                    dropped.append(self._items.popitem(last=False)[1])
            else:
                self._items.move_to_end(key)
        if self._on_drop is not None:
            for old in dropped:
                self._on_drop(old)
        return item

    def values(self) -> list[T]:
        with self._lock:
            return list(self._items.values())


@functools.lru_cache(maxsize=MAX_ENDPOINTS * 4)
def parsed_url(url: str) -> httpx2.URL:
    """`url` parsed, once (URLs are immutable): httpx2 parses a request's URL
    string at every request, about a fortieth of an I/O worker's CPU. Raises
    `httpx2.InvalidURL`, which is not remembered."""
    return httpx2.URL(url)


class _AsyncClient(httpx2.AsyncClient):
    """httpx2's async client, each URL string it is given parsed once (the
    `openai` SDK hands it every request's URL as a string), its own cookie jar
    (which keeps none) not walked at every request."""

    def _merge_url(self, url: httpx2.URL | str) -> httpx2.URL:
        return super()._merge_url(parsed_url(url) if isinstance(url, str) else url)

    def _merge_cookies(self, cookies: Any = None) -> Any:
        return cookies  # the client's own are none (`_no_cookies`): the request's alone


@dataclass(frozen=True)
class _AsyncEndpoint:
    """An async client and the transport under it, which closes when retired."""

    client: httpx2.AsyncClient
    transport: AsyncPolicyTransport

    def retire(self) -> None:
        self.transport.retire()


class _Process:
    """This process's clients, under the policy they were built with."""

    def __init__(self, policy: Policy, ca_bundle: str, ssl_context: ssl.SSLContext) -> None:
        self.pid = os.getpid()
        self.policy = policy
        self.ca_bundle = ca_bundle
        self.ssl_context = ssl_context
        self.clients: Registry[httpx2.Client] = Registry()
        self.async_clients: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, Registry[_AsyncEndpoint]] = weakref.WeakKeyDictionary()

    def retire_async(self) -> None:
        """Let this process's async clients go, each on its own loop (they are
        bound to it): replaced by the clients of a new policy."""
        for loop, registry in list(self.async_clients.items()):
            if loop.is_closed():
                continue
            for endpoint in registry.values():
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(endpoint.retire)


_lock = threading.Lock()
_current: _Process | None = None


def _ssl_context(ca_bundle: str) -> ssl.SSLContext:
    context = httpx2.create_ssl_context(trust_env=False)
    if ca_bundle:
        context.load_verify_locations(cafile=ca_bundle)
    return context


def _process() -> _Process:
    global _current
    policy = current_policy()
    ca_bundle = str(getattr(settings, "TETHER_EGRESS_CA_BUNDLE", "") or "")
    with _lock:
        if _current is None or _current.pid != os.getpid() or _current.ca_bundle != ca_bundle:
            _current = _Process(policy, ca_bundle, _ssl_context(ca_bundle))
        elif _current.policy != policy:
            _current.retire_async()
            _current = _Process(policy, ca_bundle, _current.ssl_context)
        return _current


def client_for(url: str) -> httpx2.Client:
    """The client of `url`'s endpoint in this process."""
    endpoint = endpoint_of(url)
    process = _process()
    return process.clients.get(endpoint, lambda: httpx2.Client(
        transport=PolicyTransport(process.policy, ssl_context=process.ssl_context,
                                  limits=LIMITS),
        follow_redirects=False, trust_env=False, timeout=DEFAULT_TIMEOUT, cookies=_no_cookies()))


def max_response_bytes() -> int:
    """How much of a response the shared async clients read (`TETHER_MAX_RESPONSE_BYTES`):
    never less than twice a tool result's own limit, which its caller cuts first."""
    tether = settings.TETHER
    return max(int(tether["MAX_RESPONSE_BYTES"]), 2 * int(tether["MAX_TOOL_RESULT_BYTES"]))


def async_client_for(url: str) -> httpx2.AsyncClient:
    """The async client of `url`'s endpoint for the running event loop."""
    return _async_endpoint(url).client


@contextlib.asynccontextmanager
async def astream(method: str, url: str, *, headers: dict[str, str], timeout_s: float,
                  json: Any = None) -> AsyncIterator[httpx2.Response]:
    """`async_client_for(url).stream(...)`, the response's body not yet read,
    sent straight to the endpoint's transport: what the client would add for
    these clients is nothing (no base URL, auth, cookies, redirects or default
    headers a call relies on), and its request building and send layers cost
    as much CPU as the transport's own work (py-spy, the I/O benchmark).
    `timeout_s` bounds the whole call. Raises httpx2's errors as the client would."""
    transport = _async_endpoint(url).transport
    request = httpx2.Request(method, parsed_url(url), json=json, headers=headers,
                             extensions={"timeout": httpx2.Timeout(timeout_s).as_dict()})
    response = await transport.handle_async_request(request)
    response.request = request
    try:
        yield response
    finally:
        await response.aclose()


def _async_endpoint(url: str) -> _AsyncEndpoint:
    endpoint = endpoint_of(url)
    process = _process()
    loop = asyncio.get_running_loop()
    with _lock:
        clients = process.async_clients.get(loop)
        if clients is None:
            clients = Registry(MAX_ENDPOINTS, on_drop=_AsyncEndpoint.retire)
            process.async_clients[loop] = clients

    def build() -> _AsyncEndpoint:
        transport = AsyncPolicyTransport(process.policy, ssl_context=process.ssl_context,
                                         limits=ASYNC_LIMITS, max_body=max_response_bytes)
        return _AsyncEndpoint(_AsyncClient(
            transport=transport, follow_redirects=False, trust_env=False,
            timeout=DEFAULT_TIMEOUT, cookies=_no_cookies()), transport)

    return clients.get(endpoint, build)


def close_async_clients(timeout_s: float = 2.0) -> None:
    """Close this process's async clients, each on its loop while that loop
    still runs (at exit, after a worker's drain): a session left to the
    collector logs "Unclosed client session", by then often to a closed
    stream. Calls still out on them are cut. Not from one of those loops."""
    process = _current
    if process is None or process.pid != os.getpid():
        return
    try:
        here: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        here = None
    for loop, registry in list(process.async_clients.items()):
        if loop is here or loop.is_closed() or not loop.is_running():
            continue  # its own loop would wait on itself; a stopped one cannot close them
        with _lock:  # a later call on this loop builds new clients
            process.async_clients.pop(loop, None)
        closing = asyncio.run_coroutine_threadsafe(_aclose(registry.values()), loop)
        with contextlib.suppress(Exception):  # a loop that will not answer: leave it
            closing.result(timeout_s)


async def _aclose(endpoints: list[_AsyncEndpoint]) -> None:
    for endpoint in endpoints:
        endpoint.retire()
    await asyncio.gather(*(e.transport.aclose() for e in endpoints), return_exceptions=True)


atexit.register(close_async_clients)


def owned_async_client(*, headers: dict[str, str], timeout: httpx2.Timeout,
                       wrap: Callable[[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport]
                       | None = None) -> httpx2.AsyncClient:
    """A new async client the caller owns and closes (a long-lived MCP connection
    keeps one per server), under the same policy, TLS and no-redirect rules as
    the shared clients. `wrap` may observe the policy transport's requests."""
    process = _process()
    transport: httpx2.AsyncBaseTransport = AsyncPolicyTransport(
        process.policy, ssl_context=process.ssl_context, limits=LIMITS,
        max_body=max_response_bytes)
    if wrap is not None:
        transport = wrap(transport)
    return httpx2.AsyncClient(transport=transport, headers=headers, follow_redirects=False,
                              trust_env=False, timeout=timeout, cookies=_no_cookies())
