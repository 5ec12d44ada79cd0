"""HTTPS through the outbound transport: the connection goes to the address the
policy checked, while TLS still sends the URL's host name (SNI) and verifies
the certificate against it. A real TLS server on 127.0.0.1 with certificates
from a test CA (trustme)."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trustme

from tests.fakes.http_tool_server import FakeToolServer, Reply
from tools_app.outbound import client_for


@pytest.fixture
def ca(tmp_path: Path, settings: Any) -> trustme.CA:
    authority = trustme.CA()
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    settings.TETHER_EGRESS_CA_BUNDLE = str(bundle)
    return authority


class _TlsServer:
    """The fake HTTP service over TLS with a certificate for `names`; records the
    server names (SNI) clients sent."""

    def __init__(self, ca: trustme.CA, *names: str) -> None:
        self.server_names: list[str | None] = []
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*names).configure_cert(context)
        context.sni_callback = lambda _sock, name, _ctx: self.server_names.append(name)
        self.fake = FakeToolServer(ssl_context=context)
        self.fake.on("GET", "/", Reply(200, {"ok": True}))
        self.url = f"https://localhost:{self.fake.port}/"


@pytest.fixture
def tls(ca: trustme.CA) -> Iterator[Any]:
    servers: list[_TlsServer] = []

    def start(*names: str) -> _TlsServer:
        servers.append(_TlsServer(ca, *names))
        return servers[-1]

    yield start
    for server in servers:
        server.fake.close()


def test_https_sends_and_verifies_the_host_name_while_connecting_to_the_checked_address(tls):
    server = tls("localhost")
    assert client_for(server.url).get(server.url, timeout=5).json() == {"ok": True}
    assert server.server_names == ["localhost"]  # the name, not 127.0.0.1


@pytest.mark.parametrize("names, trusted", [
    (("other.example",), True),  # a certificate for another name
    (("localhost",), False),  # a certificate from a CA not trusted (the default store only)
])
def test_a_certificate_that_does_not_vouch_for_the_host_is_refused(tls, settings, names, trusted):
    server = tls(*names)
    if not trusted:
        settings.TETHER_EGRESS_CA_BUNDLE = ""
    with pytest.raises(httpx2.ConnectError, match="certificate verify failed"):
        client_for(server.url).get(server.url, timeout=5)
    assert server.fake.requests == []
