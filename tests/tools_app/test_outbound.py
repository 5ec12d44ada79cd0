"""The outbound-address policy, total timeouts and long-lived clients, for HTTP
tools and status queries (tools_app/outbound). Real listeners on loopback:
127.0.0.1 is allowed by the suite's TETHER_EGRESS_ALLOW (as an operator allows
an internal service), 127.0.0.2 is an attacker's address the policy refuses."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import threading
import time

import httpx2
import pytest
from django.core.exceptions import ImproperlyConfigured

from approvals_app.models import Reconciliation
from foundations.ioloop import run_io
from tasks_app.machine import TaskStatus
from tasks_app.models import Step, StepStatus, Task
from tests.factories import submit
from tests.fakes.http_tool_server import Reply
from tests.fakes.listeners import DripServer, EventServer, Listener
from tests.fakes.runtime import add_agent, add_tool, assert_log_consistent, events_of
from tests.helpers import drive, wait_for
from tools_app.outbound import (
    GATHER_EVENTS_S,
    REFUSED,
    EgressRefusedError,
    async_client_for,
    client_for,
    close_async_clients,
    current_policy,
    url_problem,
)
from tools_app.outbound import policy as policy_module
from tools_app.outbound.clients import Registry
from tools_app.outbound.policy import Allowed, is_public, parse_entry
from tools_app.outbound.transport import AsyncPolicyTransport, ResponseTooLargeError
from tools_app.services import tool_create

FINAL = {"final": {"ok": True}}
# What the issue measured: a byte every 0.7 s kept a 1 s tool busy for 27 s.
ISSUE_HOLD_S = 27.0


@pytest.fixture
def attacker():  # type: ignore[no-untyped-def]
    listener = Listener("127.0.0.2")
    yield listener
    listener.close()


# --- the policy ------------------------------------------------------------------------


@pytest.mark.parametrize("address", [
    "127.0.0.2", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "239.255.255.250", "255.255.255.255", "240.0.0.1", "192.0.2.1",
    "198.18.0.1", "192.88.99.1", "::1", "::", "fe80::1", "fd00::1", "fec0::1", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1", "2002:7f00:1::", "2002:a9fe:a9fe::",
    "64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::a00:1", "2001::1", "2001:db8::1",
])
def test_non_public_addresses_are_refused(address):
    assert not is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700::1111",
                                     "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::"])
def test_public_addresses_pass(address):
    assert is_public(ipaddress.ip_address(address))


@pytest.mark.parametrize("url", [
    "http://127.0.0.2:8000/x", "http://10.0.0.1/x", "http://169.254.169.254/latest/meta-data/",
    "http://2130706434/x",  # 127.0.0.2 spelled as a decimal number
    "http://0x7f000002/x",  # ... in hex
    "http://127.2/x",  # ... short
    "http://0.0.0.0:6379/", "http://0/", "http://[::ffff:127.0.0.2]/", "http://[::ffff:7f00:2]/",
    "http://[2002:7f00:2::]/", "https://[64:ff9b::a00:1]/", "http://[fd00::1]/",
    "http://no-such-host.invalid/",  # unresolvable: refused in the same words
])
def test_registration_refuses_every_spelling_of_a_refused_address(url):
    assert url_problem(url) == REFUSED


def test_a_spelling_the_client_cannot_parse_is_not_a_url():
    assert url_problem("http://0177.0.0.2/x") == "an http(s) URL"  # octal: httpx2 refuses it


def test_a_refusal_says_the_same_whatever_the_target():
    problems = {url_problem(u) for u in ("http://127.0.0.2:5432/", "http://127.0.0.2:1/",
                                         "http://10.9.9.9/", "http://nothing.invalid/")}
    assert problems == {REFUSED}
    assert "127" not in REFUSED and "10." not in REFUSED


def test_public_literals_and_allowed_loopback_pass():
    assert url_problem("https://8.8.8.8/v1") is None
    assert url_problem("http://127.0.0.1:11434/v1") is None  # the suite allows 127.0.0.1
    assert url_problem("http://localhost:9/x") is None  # ... and localhost by name


def test_localhost_and_the_ipv6_loopback_are_refused_unless_allowed(settings):
    settings.TETHER_EGRESS_ALLOW = []  # production's default
    for url in ("http://localhost:8000/", "http://[::1]:8000/", "http://127.0.0.1:11434/v1"):
        assert url_problem(url) == REFUSED, url
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1"]
    assert url_problem("http://[::1]:8000/") == REFUSED
    assert url_problem("http://127.0.0.1:8000/") is None
    assert url_problem("http://localhost:8000/") is None  # resolves to an allowed address


def test_allow_entries_hosts_ports_and_cidrs(settings):
    settings.TETHER_EGRESS_ALLOW = ["localhost:11434", "10.20.0.0/16", "[::1]:8080"]
    assert url_problem("http://localhost:11434/v1") is None
    assert url_problem("http://localhost:11435/v1") == REFUSED  # another port
    assert url_problem("http://127.0.0.1:11434/v1") == REFUSED  # the name was allowed, not the IP
    assert url_problem("http://10.20.3.4:9000/") is None
    assert url_problem("http://10.21.0.1/") == REFUSED
    assert url_problem("http://[::1]:8080/") is None
    assert url_problem("http://[::1]:8081/") == REFUSED
    assert parse_entry("Ollama.Internal.") == Allowed(host="ollama.internal")
    assert parse_entry("127.0.0.1:11434") == Allowed(
        network=ipaddress.ip_network("127.0.0.1/32"), port=11434)


@pytest.mark.parametrize("entry", ["host:port", "10.0.0.0/33", "[::1", "a b", "h:0"])
def test_a_malformed_allow_entry_is_a_configuration_error(settings, entry):
    settings.TETHER_EGRESS_ALLOW = [entry]
    with pytest.raises(ImproperlyConfigured):
        current_policy()


# --- at call time ------------------------------------------------------------------------


def _register_while_allowed(world, settings, **fields):  # type: ignore[no-untyped-def]
    """A tool registered while the operator allowed 127.0.0.2, then the allowance
    withdrawn: the call-time check is what stands between the tool and the address."""
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1", "127.0.0.2"]
    tool_create(tenant_id=world.tenant.pk, name="exfil", kind="http",
                args_schema={"type": "object"}, max_retries=3, **fields)
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1", "localhost", "::1"]
    add_agent(world.tenant, "exfil-agent", ["exfil"])


def _run(world) -> Task:  # type: ignore[no-untyped-def]
    return drive(submit(world.tenant, [{"tool": "exfil", "args": {"q": 1}}, FINAL],
                        agent="exfil-agent").pk)


@pytest.mark.django_db(transaction=True)
def test_a_refused_call_is_a_permission_error_and_nothing_reaches_the_address(
        world, settings, attacker):
    _register_while_allowed(world, settings, url=attacker.url("/steal"), side_effect="read")
    task = _run(world)

    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED
    assert step.error == {"type": "egress_refused", "message": REFUSED}  # nothing about the target
    assert step.attempt == 0 and events_of(task.pk, "retryable_error") == []  # not retried
    assert attacker.connections == 0  # not even a TCP handshake
    assert_log_consistent(task.pk)


@pytest.mark.django_db(transaction=True)
def test_a_refused_status_query_reaches_nothing_and_leaves_the_outcome_unknown(
        world, settings, fake_http, attacker):
    fake_http.on("POST", "/pay", Reply(200, {}, hold=fake_http.hold()))
    _register_while_allowed(world, settings, url=fake_http.url("/pay"), side_effect="write",
                            timeout_s=0.5, status_url=attacker.url("/status/{key}"))
    task = _run(world)

    assert task.status == TaskStatus.WAITING_FOR_RECONCILIATION
    rec = Reconciliation.objects.get(task=task)
    assert rec.status_answer["state"] == "unknown"
    assert REFUSED in rec.status_answer["detail"] and "127.0.0.2" not in str(rec.status_answer)
    assert attacker.connections == 0


@pytest.mark.django_db(transaction=True)
def test_a_redirect_is_not_followed(world, fake_http, attacker):
    fake_http.on("POST", "/go", Reply(307, {}, headers={"Location": attacker.url("/steal")}))
    tool_create(tenant_id=world.tenant.pk, name="exfil", kind="http", url=fake_http.url("/go"),
                args_schema={"type": "object"}, side_effect="read")
    add_agent(world.tenant, "exfil-agent", ["exfil"])
    task = _run(world)

    step = Step.objects.get(task=task, step_no=1)
    assert step.status == StepStatus.FAILED and step.error["status"] == 307
    assert len(fake_http.requests_to("POST", "/go")) == 1
    assert attacker.connections == 0


def _spellings(attacker: Listener) -> list[str]:
    """127.0.0.2 as a URL may spell it: aiohttp connects to an address literal
    without any resolver, so each one must be checked as it stands."""
    return [attacker.url("/"), f"http://2130706434:{attacker.port}/",
            f"http://127.2:{attacker.port}/", f"http://0x7f.0.0.2:{attacker.port}/",
            f"http://[::ffff:127.0.0.2]:{attacker.port}/"]


def test_the_connection_goes_to_the_checked_address(settings, attacker):
    """A name is resolved, checked and connected to in one place: there is no
    second lookup a rebinding DNS answer could change. `localhost` allowed by
    address only (127.0.0.1) may not reach 127.0.0.2, even though it is the
    same machine, and a raw IP spelled otherwise is resolved before the check."""
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1"]
    for url in _spellings(attacker):
        with pytest.raises(EgressRefusedError) as refused:
            client_for(url).get(url, timeout=2)
        assert str(refused.value) == REFUSED
    assert attacker.connections == 0


def test_the_async_client_checks_every_spelling_of_an_address(settings, attacker):
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1"]

    async def scenario() -> None:
        for url in _spellings(attacker):
            with pytest.raises(EgressRefusedError) as refused:
                await async_client_for(url).get(url, timeout=2)
            assert str(refused.value) == REFUSED

    asyncio.run(scenario())
    assert attacker.connections == 0


# --- total timeouts ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("headers_first", [True, False], ids=["body-drips", "headers-drip"])
def test_a_drip_feeding_tool_is_bounded_by_its_total_timeout(world, headers_first):
    server = DripServer({"refund_id": "r" * 40}, interval_s=0.7, headers_first=headers_first)
    try:
        tool_create(tenant_id=world.tenant.pk, name="exfil", kind="http", url=server.url("/x"),
                    args_schema={"type": "object"}, side_effect="read", timeout_s=1.0,
                    max_retries=0)
        add_agent(world.tenant, "exfil-agent", ["exfil"])
        task = _run(world)

        step = Step.objects.get(task=task, step_no=1)
        assert step.status == StepStatus.FAILED and step.error["type"] == "timeout"
        assert task.status == TaskStatus.FAILED
        (drip,) = server.drips
        wait_for(drip.closed.is_set, timeout=10, message="the client to close the connection")
        held = drip.closed_at - drip.accepted_at
        print(f"held for {held:.2f}s, {drip.sent} bytes sent")
        assert held < ISSUE_HOLD_S / 2
        assert drip.sent < len(server.payload)  # cut off, not read to the end
    finally:
        server.close()


def test_the_deadline_covers_the_body_of_a_streamed_read():
    server = DripServer({"x": "y" * 40}, interval_s=0.3)
    try:
        url = server.url("/")
        started = time.monotonic()
        with pytest.raises(httpx2.ReadTimeout), client_for(url).stream(
                "GET", url, timeout=1.0) as response:
            for _ in response.iter_bytes():
                pass
        print(f"timed out after {time.monotonic() - started:.2f}s")
        wait_for(server.drips[0].closed.is_set, timeout=10, message="the connection closed")
    finally:
        server.close()


# --- long-lived clients -------------------------------------------------------------------


def test_one_client_per_endpoint_per_process(fake_http, settings):
    first = client_for(fake_http.url("/a"))
    assert client_for(fake_http.url("/b?c=1")) is first  # same endpoint, another path
    assert client_for(f"http://localhost:{fake_http.port}/a") is not first  # another host
    fake_http.on("GET", "/a", Reply(200, {"n": 1}))
    for _ in range(2):
        assert first.get(fake_http.url("/a"), timeout=2).json() == {"n": 1}
    assert client_for(fake_http.url("/a")) is first  # still the same after calls
    settings.TETHER_EGRESS_ALLOW = ["127.0.0.1"]  # a new policy: new clients
    assert client_for(fake_http.url("/a")) is not first


@pytest.mark.django_db(transaction=True)
def test_two_tool_calls_share_the_client_of_their_endpoint(world, fake_http):
    fake_http.on("POST", "/refunds", Reply(200, {"refund_id": "r1"}))
    tool_create(tenant_id=world.tenant.pk, name="exfil", kind="http",
                url=fake_http.url("/refunds"), args_schema={"type": "object"}, side_effect="read")
    add_agent(world.tenant, "exfil-agent", ["exfil"])
    client = client_for(fake_http.url("/refunds"))
    for _ in range(2):
        assert _run(world).status == TaskStatus.SUCCEEDED
    assert client_for(fake_http.url("/refunds")) is client
    assert len(fake_http.requests_to("POST", "/refunds")) == 2


# --- the async counterpart ----------------------------------------------------------------


def test_the_async_client_keeps_the_same_policy_and_deadline(settings, attacker):
    server = DripServer({"x": "y" * 40}, interval_s=0.3)

    async def scenario() -> None:
        with pytest.raises(EgressRefusedError):
            await async_client_for(attacker.url("/")).get(attacker.url("/"), timeout=2)
        client = async_client_for(server.url("/"))
        assert async_client_for(server.url("/other")) is client
        with pytest.raises(httpx2.ReadTimeout):
            await client.get(server.url("/"), timeout=1.0)

    try:
        asyncio.run(scenario())
        wait_for(server.drips[0].closed.is_set, timeout=10, message="the connection closed")
        assert attacker.connections == 0
    finally:
        server.close()


def test_an_async_client_let_go_finishes_its_calls_then_closes(fake_http, settings):
    """A new policy replaces the process's async clients: the old one's call
    already out is answered, and then its connections close (a session left to
    the collector keeps its sockets until then, and aiohttp logs it)."""
    gate = threading.Event()
    fake_http.on("GET", "/slow", Reply(200, {"n": 1}, hold=gate))
    url = fake_http.url("/slow")

    async def scenario() -> None:
        old = async_client_for(url)
        out = asyncio.ensure_future(old.get(url, timeout=10))
        await _until(lambda: len(fake_http.requests_to("GET", "/slow")) == 1)
        settings.TETHER_EGRESS_ALLOW = ["127.0.0.1"]  # a new policy: new clients
        new = async_client_for(url)
        assert new is not old
        await asyncio.sleep(0)  # the old client's retirement runs on this loop
        gate.set()
        assert (await out).json() == {"n": 1}  # the call out was not cut short
        await _until(lambda: _closed(old))
        assert (await new.get(url, timeout=10)).json() == {"n": 1}
        # a call that still comes to the old client is served, then closed too
        assert (await old.get(url, timeout=10)).json() == {"n": 1}
        await _until(lambda: _closed(old))

    asyncio.run(scenario())


def test_the_async_clients_close_at_exit_on_their_loop(fake_http):
    """At exit (and after a worker's drain) the process's async clients close
    on their loop: a session left to the collector logs "Unclosed client
    session", at exit to a stream already closed. A later call gets new ones."""
    fake_http.on("GET", "/x", Reply(200, {"n": 1}))
    url = fake_http.url("/x")

    async def call() -> httpx2.AsyncClient:
        client = async_client_for(url)
        assert (await client.get(url, timeout=10)).json() == {"n": 1}
        return client

    client = run_io(call())
    assert not _closed(client)
    close_async_clients()
    assert _closed(client)
    assert run_io(call()) is not client


def test_a_shared_async_client_reads_no_response_past_the_limit(fake_http, settings):
    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 10_000,
                       "MAX_TOOL_RESULT_BYTES": 1_000}
    fake_http.on("GET", "/big", Reply(200, {"blob": "x" * 50_000}))
    fake_http.on("GET", "/small", Reply(200, {"blob": "x" * 100}))

    async def scenario() -> None:
        client = async_client_for(fake_http.url("/big"))
        with pytest.raises(ResponseTooLargeError, match="larger than 10000 bytes"):
            await client.get(fake_http.url("/big"), timeout=10)
        small = await client.get(fake_http.url("/small"), timeout=10)  # the client goes on
        assert small.json() == {"blob": "x" * 100}

    asyncio.run(scenario())


def test_a_shared_async_client_decodes_gzip_itself_within_the_limit(fake_http, settings):
    """Deflate and gzip are decoded by the transport as they come, so its limit
    holds on the decoded body (a small gzip can decode to gigabytes)."""
    import gzip
    import zlib

    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 10_000,
                       "MAX_TOOL_RESULT_BYTES": 1_000}
    body = json.dumps({"blob": "y" * 5_000}).encode()
    fake_http.on("GET", "/gzip", Reply(200, body=gzip.compress(body),
                                       headers={"Content-Encoding": "gzip"}))
    fake_http.on("GET", "/deflate", Reply(200, body=zlib.compress(body),
                                          headers={"Content-Encoding": "deflate"}))
    fake_http.on("GET", "/bomb", Reply(200, body=gzip.compress(b"0" * 50_000_000),
                                       headers={"Content-Encoding": "gzip"}))

    async def scenario() -> None:
        client = async_client_for(fake_http.url("/gzip"))
        for path in ("/gzip", "/deflate"):
            response = await client.get(fake_http.url(path), timeout=10)
            assert response.json() == {"blob": "y" * 5_000}
            assert "content-encoding" not in response.headers  # decoded: not again
        with pytest.raises(ResponseTooLargeError, match="larger than 10000 bytes"):
            await client.get(fake_http.url("/bomb"), timeout=10)
        assert fake_http.requests_to("GET", "/gzip")[0].headers["accept-encoding"] == (
            "gzip, deflate")

    asyncio.run(scenario())


def test_a_gzip_bomb_is_never_decoded_past_the_limit_in_memory(fake_http, settings):
    """200 MB of zeros, gzipped to about 200 kB and sent at once: decoding stops
    a piece past the limit, whatever arrives in one chunk."""
    import tracemalloc
    import zlib

    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 10_000,
                       "MAX_TOOL_RESULT_BYTES": 1_000}
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # gzip
    zeros = b"0" * (1 << 20)
    bomb = b"".join(squeeze.compress(zeros) for _ in range(200)) + squeeze.flush()
    fake_http.on("GET", "/bomb", Reply(200, body=bomb, headers={"Content-Encoding": "gzip"}))

    async def scenario() -> int:
        client = async_client_for(fake_http.url("/bomb"))
        tracemalloc.start()
        try:
            with pytest.raises(ResponseTooLargeError):
                await client.get(fake_http.url("/bomb"), timeout=10)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert asyncio.run(scenario()) < 16 << 20  # a few decoded pieces at most, not 200 MB


def test_an_event_stream_is_limited_per_event_not_as_a_whole(fake_http, settings):
    """An MCP server's event stream may last as long as its connection: the limit
    holds on each event, and any other body as a whole."""
    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 10_000,
                       "MAX_TOOL_RESULT_BYTES": 1_000}
    sse = {"Content-Type": "text/event-stream"}
    many = b"".join(b"data: " + b"z" * 900 + b"\n\n" for _ in range(50))  # 45 kB in all
    fake_http.on("GET", "/many", Reply(200, body=many, headers=sse))
    fake_http.on("GET", "/huge", Reply(200, body=b"data: " + b"z" * 20_000 + b"\r\n\r\n",
                                       headers=sse))

    async def scenario() -> None:
        client = async_client_for(fake_http.url("/many"))
        assert (await client.get(fake_http.url("/many"), timeout=10)).content == many
        with pytest.raises(ResponseTooLargeError, match="an event of the response is larger"):
            await client.get(fake_http.url("/huge"), timeout=10)

    asyncio.run(scenario())


def _read_events(url: str, *, gather_s: float | None = None,
                 timeout: float = 10.0) -> list[bytes]:
    """An event stream's body as the pieces the client's transport yields."""
    async def read() -> list[bytes]:
        extensions = {GATHER_EVENTS_S: gather_s} if gather_s is not None else None
        async with async_client_for(url).stream("GET", url, timeout=timeout,
                                                extensions=extensions) as response:
            return [piece async for piece in response.aiter_raw()]
    return asyncio.run(read())


@pytest.mark.parametrize("end", [b"\n\n", b"\r\n\r\n", b"\r\r"])
def test_an_event_at_the_limit_passes_and_one_byte_more_is_refused_however_it_is_cut(
        settings, end):
    """The limit holds on each event, the blank line ending it included, when an
    event and its end are split across reads (a CRLF cut in two)."""
    settings.TETHER = {**settings.TETHER, "MAX_RESPONSE_BYTES": 100,
                       "MAX_TOOL_RESULT_BYTES": 1}
    event = b"data: " + b"z" * (100 - 6 - len(end)) + end  # 100 bytes
    pieces = [event[:50], event[50:-1], event[-1:] + event[:-len(end) - 1], end[:1], end[1:]]
    server = EventServer(pieces)
    try:
        assert b"".join(_read_events(server.url("/"))) == b"".join(pieces)
        server.pieces = [event[:-1], event[-1:] + b"z" + event[:-1], event[-1:]]
        with pytest.raises(ResponseTooLargeError, match="an event of the response is larger"):
            _read_events(server.url("/"))
    finally:
        server.close()


def test_a_gathering_read_takes_what_arrived_meanwhile_and_never_waits_for_the_end():
    """A model's stream asked to be gathered (`GATHER_EVENTS_S`): fewer pieces
    than events, the same bytes, and the end of the body read at once (the
    gathering wait is far longer than the stream)."""
    events = [f"data: {{\"i\": {i}}}\n\n".encode() for i in range(20)]
    server = EventServer(events, interval_s=0.01)
    try:
        pieces = _read_events(server.url("/"), gather_s=0.1)
        assert b"".join(pieces) == b"".join(events) and len(pieces) < len(events)
        started = time.monotonic()
        assert b"".join(_read_events(server.url("/"), gather_s=60)) == b"".join(events)
        assert time.monotonic() - started < 30
    finally:
        server.close()


def test_a_gathering_read_still_ends_at_the_calls_deadline():
    server = EventServer([b"data: {}\n\n"], hold=True)
    try:
        started = time.monotonic()
        with pytest.raises(httpx2.ReadTimeout):
            _read_events(server.url("/"), gather_s=60, timeout=0.5)
        assert time.monotonic() - started < 30
    finally:
        server.close()


def test_an_evicted_endpoint_is_handed_to_its_owner():
    dropped: list[str] = []
    registry: Registry[str] = Registry(2, on_drop=dropped.append)
    for key in ("a", "b", "a", "c"):  # "a" used again: "b" is the least recent
        registry.get(key, lambda k=key: k.upper())  # type: ignore[misc]
    assert dropped == ["B"] and sorted(registry.values()) == ["A", "C"]


async def _until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.01)


def _closed(client: httpx2.AsyncClient) -> bool:
    transport = client._transport
    assert isinstance(transport, AsyncPolicyTransport)
    return transport.closed


# --- names that do not resolve ---------------------------------------------------------

GONE = "gone.invalid"  # .invalid never resolves (RFC 2606)


def test_a_name_that_does_not_resolve_is_refused_like_a_private_address(settings):
    with pytest.raises(EgressRefusedError) as refused:
        current_policy().resolve(GONE, 80)
    assert str(refused.value) == REFUSED
    # the operator's own name: a connection error (retried), not a tenant's refusal
    settings.TETHER_EGRESS_ALLOW = [GONE]
    with pytest.raises(OSError) as failed:
        current_policy().resolve(GONE, 80)
    assert not isinstance(failed.value, EgressRefusedError)


def test_the_async_path_refuses_a_name_that_does_not_resolve():
    async def scenario() -> None:
        with pytest.raises(EgressRefusedError):
            await async_client_for(f"http://{GONE}/").get(f"http://{GONE}/", timeout=2)

    asyncio.run(scenario())


def test_host_name_lookups_in_flight_are_bounded(settings):
    """A lookup waits at most DNS_TIMEOUT_S; names that never answer cannot pile
    up threads: past MAX_LOOKUPS in flight, a lookup is a timeout at once."""
    taken = 0
    try:
        while policy_module._lookups.acquire(blocking=False):
            taken += 1
        assert taken == policy_module.MAX_LOOKUPS
        with pytest.raises(TimeoutError):
            policy_module.lookup("localhost", 80, timeout=5.0)
        assert url_problem("http://localhost:9/x") == REFUSED
    finally:
        for _ in range(taken):
            policy_module._lookups.release()
    assert policy_module.lookup("localhost", 80, timeout=5.0)


def test_the_async_clients_lookups_share_the_bound_and_no_executor(settings):
    """The async clients' resolver counts its lookups under the same MAX_LOOKUPS
    (past it, a connect timeout at once) and runs them in threads of their own:
    names that never answer cannot fill the loop's default executor, which
    other work shares."""
    settings.TETHER_EGRESS_ALLOW = ["localhost"]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        blocked = loop.run_in_executor(None, time.sleep, 0)  # the default executor exists
        await blocked
        executor = loop._default_executor  # type: ignore[attr-defined]
        threads = len(executor._threads)
        taken = 0
        try:
            while policy_module._lookups.acquire(blocking=False):
                taken += 1
            assert taken == policy_module.MAX_LOOKUPS
            with pytest.raises(httpx2.ConnectTimeout, match="too many host name lookups"):
                await async_client_for("http://localhost:9/").get("http://localhost:9/",
                                                                   timeout=2)
        finally:
            for _ in range(taken):
                policy_module._lookups.release()
        assert await policy_module.alookup("localhost", 9, 5.0)
        with pytest.raises(httpx2.ConnectError):  # resolved, allowed, nothing listens
            await async_client_for("http://localhost:9/").get("http://localhost:9/", timeout=2)
        assert len(executor._threads) == threads  # no lookup took an executor thread

    asyncio.run(scenario())


@pytest.mark.django_db(transaction=True)
def test_a_tool_whose_name_stopped_resolving_fails_as_refused_and_is_not_retried(world):
    """Registered while its name resolved (written here directly: registration
    refuses a name that does not resolve); at call time the same permission error
    as any refusal, never a retried connect_error that tells resolvable from not."""
    add_tool(world.tenant, "exfil", kind="http", url=f"http://{GONE}:8080/steal",
             side_effect="read", max_retries=3)
    add_agent(world.tenant, "exfil-agent", ["exfil"])
    task = _run(world)

    assert task.status == TaskStatus.FAILED and task.failure_reason == "permission_denied"
    step = Step.objects.get(task=task, step_no=1)
    assert step.error == {"type": "egress_refused", "message": REFUSED}
    assert step.attempt == 0 and events_of(task.pk, "retryable_error") == []
    assert_log_consistent(task.pk)


def test_no_client_keeps_a_cookie_for_the_next_call(fake_http):
    """One client serves every tenant calling its endpoint: a cookie set in
    answer to one call must not go out with the next (another tenant's)."""
    fake_http.on("GET", "/login", Reply(200, {}, headers={"Set-Cookie": "session=tenant-a"}))
    fake_http.on("GET", "/next", Reply(200, {}))
    url = fake_http.url("/login")

    client_for(url).get(url, timeout=2)
    client_for(url).get(fake_http.url("/next"), timeout=2)

    async def scenario() -> None:
        client = async_client_for(url)
        await client.get(url, timeout=2)
        await client.get(fake_http.url("/next"), timeout=2)

    asyncio.run(scenario())
    sent = fake_http.requests_to("GET", "/next")
    assert len(sent) == 2 and all("cookie" not in r.headers for r in sent)
