"""The WebSocket origin check: a socket is accepted only from the site's own
origin (scheme, host and port) or from an origin in `CSRF_TRUSTED_ORIGINS`.

A browser sends the session cookie with a WebSocket handshake from any page,
so the `Origin` header is what tells the console's own pages from another
site's (cross-site WebSocket hijacking). Channels' `AllowedHostsOriginValidator`
compares the origin's host name only: `http://host:other-port` or a plain-HTTP
origin of an HTTPS site would pass. This compares as Django's CSRF check does
for forms: the origin must equal `http(s)://<Host header>`, the scheme being
the socket's own (`ws` ↔ `http`, `wss` ↔ `https`, or the proxy's header when
`SECURE_PROXY_SSL_HEADER` is set), with a Host in `ALLOWED_HOSTS`; or match
`CSRF_TRUSTED_ORIGINS` (exactly, or a `https://*.example.com` pattern). A
handshake without an `Origin` is refused.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain


class SameOriginValidator:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not origin_allowed(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.app(scope, receive, send)


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = _headers(scope)
    origin = headers.get("origin", "").lower()
    if not origin or origin == "null":
        return False
    host = headers.get("host", "").lower()
    domain, _port = split_domain_port(host)
    if domain and validate_host(domain, settings.ALLOWED_HOSTS):
        own = f"{'https' if _secure(scope, headers) else 'http'}://{host}"
        if origin == own:
            return True
    return _trusted(origin)


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    return {
        name.decode("latin1").lower(): value.decode("latin1")
        for name, value in scope.get("headers", [])
    }


def _secure(scope: dict[str, Any], headers: dict[str, str]) -> bool:
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy:
        meta_name, secure_value = proxy
        # Django names it as in request.META: HTTP_X_FORWARDED_PROTO
        header = meta_name.removeprefix("HTTP_").replace("_", "-").lower()
        if header in headers:
            return headers[header].split(",", 1)[0].strip() == secure_value
    return scope.get("scheme") == "wss"


def _trusted(origin: str) -> bool:
    trusted = [o.lower() for o in settings.CSRF_TRUSTED_ORIGINS]
    if origin in trusted:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return any(
        "*" in pattern
        and urlsplit(pattern).scheme == parsed.scheme
        and is_same_domain(parsed.netloc, urlsplit(pattern).netloc.lstrip("*"))
        for pattern in trusted
    )
