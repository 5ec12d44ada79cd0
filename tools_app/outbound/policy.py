"""The outbound-address policy: which addresses a call made for a tenant may reach.

A tenant's admin chooses tool URLs, status URLs and model base URLs, so every
one of them is resolved and each address it resolves to must be public.
Refused unless the operator allows them in `TETHER_EGRESS_ALLOW`: loopback,
private, link-local (cloud metadata), shared (CGNAT), multicast, reserved,
unspecified and documentation ranges, also when they hide inside an IPv6
address (IPv4-mapped, 6to4, NAT64). Any spelling of an address (decimal
`2130706433`, octal `0177.0.0.1`, `127.1`) is resolved by the system resolver
first, so the check always sees the address the connection would use.

`TETHER_EGRESS_ALLOW` entries (comma-separated):

- a CIDR or an address (`10.20.0.0/16`, `127.0.0.1`, `::1`): those addresses, any port;
- a host name (`ollama.internal`, `localhost`): that name, whatever it resolves to;
- either with a port (`localhost:11434`, `10.0.0.5:8080`, `[::1]:8000`): that port only.

A host resolving to several addresses is refused when any of them is
refused (a mixed answer is how a rebinding attack starts). A refusal says
the same whatever the target (no address, no port state, no "does not
resolve"): it must not be an oracle of the server's network. So a name that
does not resolve is refused like a private address (a permission error, not
retried), unless the operator allowed that very name (then it is a
connection error, retried: the operator's own DNS had a bad moment).

The system resolver has no timeout of its own, so `lookup` (and `alookup`,
awaited on an event loop) runs it in a thread of its own and waits at most
`DNS_TIMEOUT_S` (less when the call's deadline is nearer); at most
`MAX_LOOKUPS` lookups are in flight in a process, sync and async together, so
names that never answer cannot pile up threads, nor fill a thread pool that
other work shares (the event loop's default executor). A lookup that times
out, or finds the limit reached, is a timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx2
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

REFUSED = (
    "refused by the outbound-address policy: the host must resolve to public addresses only, "
    "unless the operator allows it in TETHER_EGRESS_ALLOW"
)
SCHEMES = {"http": 80, "https": 443}
DNS_TIMEOUT_S = 5.0
MAX_LOOKUPS = 64
# Ranges Python's `is_global` lets through that are no place for a tenant's call.
_EXTRA_REFUSED = tuple(
    ipaddress.ip_network(n) for n in ("192.88.99.0/24", "fec0::/10")  # 6to4 relays, site-local
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # the well-known prefix embeds an IPv4 address


class EgressRefusedError(httpx2.ConnectError):
    """The policy refused a host; the message never names the target. A connect
    error for any httpx2 caller (nothing was sent), which Tether's callers
    catch first and treat as a permission error (retrying cannot help)."""

    def __init__(self) -> None:
        super().__init__(REFUSED)


@dataclass(frozen=True)
class Allowed:
    """One entry of `TETHER_EGRESS_ALLOW`: a network or a host name, maybe one port."""

    network: IPNetwork | None = None
    host: str = ""
    port: int | None = None

    def allows_host(self, host: str, port: int) -> bool:
        return bool(self.host) and self.host == host and self.port in (None, port)

    def allows_address(self, address: IPAddress, port: int) -> bool:
        return (self.network is not None and self.port in (None, port)
                and any(a in self.network for a in _forms(address)))


@dataclass(frozen=True)
class Policy:
    allowed: tuple[Allowed, ...] = ()

    def allows_host(self, host: str, port: int) -> bool:
        """Whether the operator allowed this host name itself (no resolution needed)."""
        host = normalize_host(host)
        return any(a.allows_host(host, port) for a in self.allowed)

    def allows_address(self, address: IPAddress, port: int) -> bool:
        return is_public(address) or any(a.allows_address(address, port) for a in self.allowed)

    def resolve(self, host: str, port: int, timeout: float | None = None) -> list[str]:
        """The addresses to connect to for `host:port`, every one of them checked.
        Raises `EgressRefusedError`, `TimeoutError`, or `OSError` for a name the
        operator allowed that does not resolve or for a temporary resolver failure."""
        try:
            addresses = lookup(host, port, DNS_TIMEOUT_S if timeout is None
                               else min(timeout, DNS_TIMEOUT_S))
        except TimeoutError:
            raise
        except socket.gaierror as exc:
            # A resolver that failed for now (EAI_AGAIN) says nothing of the name:
            # a retried connection error. A name that does not exist is refused.
            if exc.errno != socket.EAI_AGAIN:
                self.refuse_unresolved(host, port)
            raise
        except OSError:
            self.refuse_unresolved(host, port)
            raise
        return self.checked(host, port, addresses)

    def refuse_unresolved(self, host: str, port: int) -> None:
        """A name that does not resolve: refused like any other target, unless the
        operator allowed that name (then the caller's connection error stands)."""
        if not self.allows_host(host, port):
            raise EgressRefusedError() from None

    def checked(self, host: str, port: int, addresses: list[str]) -> list[str]:
        """`addresses` (what `host` resolved to) when the policy allows them all."""
        if not addresses:
            raise EgressRefusedError()
        if self.allows_host(host, port):
            return _unique(addresses)
        for text in addresses:
            if not self.allows_address(ipaddress.ip_address(text.split("%", 1)[0]), port):
                raise EgressRefusedError()
        return _unique(addresses)


_lookups = threading.BoundedSemaphore(MAX_LOOKUPS)


def lookup(host: str, port: int, timeout: float) -> list[str]:
    """The system resolver's addresses for `host:port`, waited for at most
    `timeout` seconds (the lookup itself cannot be cancelled: its thread ends
    when the resolver gives up). Raises `OSError` or `TimeoutError`."""
    answer: list[Any] = []
    done = threading.Event()

    def settle(result: Any) -> None:
        answer.append(result)
        done.set()

    _start_lookup(host, port, 0, settle)
    if not done.wait(max(timeout, 0.0)):
        raise TimeoutError("the host did not resolve in time")
    return _addresses(answer[0])


async def alookup(host: str, port: int, timeout: float, family: int = 0) -> list[str]:
    """`lookup`, awaited: the loop is free meanwhile, and the lookup's thread is
    its own, not one of the loop's executor."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(_settle, future, result)

    _start_lookup(host, port, family, settle)
    try:
        async with asyncio.timeout(max(timeout, 0.0)):
            result = await future
    except TimeoutError:
        raise TimeoutError("the host did not resolve in time") from None
    return _addresses(result)


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _start_lookup(host: str, port: int, family: int, settle: Callable[[Any], None]) -> None:
    """Resolve in a thread of its own, counted under `MAX_LOOKUPS`; `settle` gets
    getaddrinfo's answer or its exception. Raises `TimeoutError` at the limit."""
    if not _lookups.acquire(blocking=False):
        raise TimeoutError("too many host name lookups in flight")

    def work() -> None:
        try:
            result: Any = socket.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM,
                                             proto=socket.IPPROTO_TCP)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting side
            result = exc
        finally:
            _lookups.release()
        settle(result)

    threading.Thread(target=work, name="tether-dns", daemon=True).start()


def _addresses(result: Any) -> list[str]:
    if isinstance(result, BaseException):
        raise result
    return [str(info[4][0]) for info in result]


def is_public(address: IPAddress) -> bool:
    """Whether `address`, and any IPv4 address embedded in it, is a public unicast one."""
    inner = _forms(address)[-1]
    return (inner.is_global and not inner.is_multicast and not inner.is_reserved
            and not any(inner in n for n in _EXTRA_REFUSED))


def _forms(address: IPAddress) -> tuple[IPAddress, ...]:
    """The address, then the IPv4 address it embeds, if any (mapped, 6to4, NAT64)."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            return address, embedded
    return (address,)


def _unique(addresses: list[str]) -> list[str]:
    return list(dict.fromkeys(addresses))


def normalize_host(host: str) -> str:
    """A host as entries are compared: lower case, no brackets, no trailing dot."""
    return host.strip().strip("[]").rstrip(".").lower()


# --- the setting ---------------------------------------------------------------


def parse_entry(entry: str) -> Allowed:
    """One `TETHER_EGRESS_ALLOW` entry; raises ValueError for a malformed one."""
    text = entry.strip()
    if not text:
        raise ValueError("an empty entry")
    if "/" in text:
        return Allowed(network=ipaddress.ip_network(text, strict=False))
    port: int | None = None
    if text.startswith("["):  # [v6] or [v6]:port
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"{entry!r}: expected [address] or [address]:port")
        if rest:
            port = _port(rest[1:], entry)
        text = host
    elif text.count(":") == 1:
        text, raw_port = text.split(":")
        port = _port(raw_port, entry)
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        host = normalize_host(text)
        if not host or any(c in host for c in " @/?#"):
            raise ValueError(f"{entry!r}: not a host, host:port or CIDR") from None
        return Allowed(host=host, port=port)
    return Allowed(network=ipaddress.ip_network(address), port=port)


def _port(raw: str, entry: str) -> int:
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise ValueError(f"{entry!r}: the port must be a number from 1 to 65535")
    return int(raw)


@functools.lru_cache(maxsize=8)
def _policy_of(entries: tuple[str, ...]) -> Policy:
    try:
        return Policy(tuple(parse_entry(e) for e in entries if e.strip()))
    except ValueError as exc:
        raise ImproperlyConfigured(f"TETHER_EGRESS_ALLOW: {exc}") from None


def current_policy() -> Policy:
    """The policy of the current settings (parsed once per distinct value)."""
    raw = getattr(settings, "TETHER_EGRESS_ALLOW", ())
    if isinstance(raw, str):
        raw = raw.split(",")
    return _policy_of(tuple(str(e) for e in raw))


# --- registration ------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def endpoint_of(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of a URL as httpx2 parses it, the host as the
    connection will resolve it (IDNA-encoded). Raises httpx2.InvalidURL or
    httpx2.UnsupportedProtocol. Remembered: every outbound call looks its
    client up by it, and parsing the URL was a twentieth of an I/O-bound
    worker's CPU (a URL that does not parse is parsed again each time)."""
    parsed = httpx2.URL(url)
    if parsed.scheme not in SCHEMES or not parsed.raw_host:
        raise httpx2.UnsupportedProtocol("only http and https URLs can be called")
    return parsed.scheme, parsed.raw_host.decode("ascii"), parsed.port or SCHEMES[parsed.scheme]


def url_problem(url: str) -> str | None:
    """Why a URL a tenant registers cannot be called (None when it can).
    Parsed as the call will parse it, resolved now; checked again at every call."""
    try:
        _, host, port = endpoint_of(url)
    except (httpx2.InvalidURL, httpx2.UnsupportedProtocol, UnicodeError):
        return "an http(s) URL"
    try:
        current_policy().resolve(host, port)
    except (EgressRefusedError, OSError, UnicodeError, ValueError):
        return REFUSED  # the same words whether the name resolves or not
    return None
