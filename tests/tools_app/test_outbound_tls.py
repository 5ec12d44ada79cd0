"""HTTPS through the outbound transport: the connection goes to the address the
policy checked, while TLS still sends the URL's host name (SNI) and verifies
the certificate against it. A real TLS server on 127.0.0.1 with certificates
from a test CA (trustme)."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trustme

from tools_app.outbound import client_for


class TlsServer:
    """Answers every GET with 200 {"ok": true}; records the SNI names it was sent."""

    def __init__(self, ca: trustme.CA, *names: str) -> None:
        self.server_names: list[str | None] = []
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert(*names).configure_cert(context)
        context.sni_callback = lambda _sock, name, _ctx: self.server_names.append(name)

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                data = json.dumps({"ok": True}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def ca(tmp_path: Path, settings: Any) -> Iterator[trustme.CA]:
    authority = trustme.CA()
    bundle = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(bundle))
    settings.TETHER_EGRESS_CA_BUNDLE = str(bundle)
    yield authority


def test_https_sends_and_verifies_the_host_name_while_connecting_to_the_checked_address(ca):
    server = TlsServer(ca, "localhost")
    try:
        url = f"https://localhost:{server.port}/"
        assert client_for(url).get(url, timeout=5).json() == {"ok": True}
        assert server.server_names == ["localhost"]  # the name, not 127.0.0.1
    finally:
        server.close()


def test_a_certificate_for_another_name_is_refused(ca):
    server = TlsServer(ca, "other.example")
    try:
        url = f"https://localhost:{server.port}/"
        with pytest.raises(httpx2.ConnectError, match="certificate verify failed"):
            client_for(url).get(url, timeout=5)
    finally:
        server.close()


def test_a_certificate_from_an_untrusted_ca_is_refused(ca, settings):
    server = TlsServer(ca, "localhost")
    settings.TETHER_EGRESS_CA_BUNDLE = ""  # the default store only
    try:
        url = f"https://localhost:{server.port}/"
        with pytest.raises(httpx2.ConnectError, match="certificate verify failed"):
            client_for(url).get(url, timeout=5)
    finally:
        server.close()
