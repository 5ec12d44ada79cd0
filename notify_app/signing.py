"""Webhook signatures: `X-Tether-Signature: t=<unix seconds>,v1=<hex>` where the hex
is HMAC-SHA256, keyed with the subscription's secret (its UTF-8 bytes, `whsec_`
prefix included), of ``"<t>.<body>"``. The timestamp inside the signed text lets
a receiver refuse replays older than its tolerance. `verify` is what a receiver
does (docs/how-to/notifications.md shows the same in five lines)."""
from __future__ import annotations

import hashlib
import hmac
import secrets
import time

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def signature(secret: str, body: bytes, *, at: int) -> str:
    digest = hmac.new(secret.encode("utf-8"), f"{at}.".encode() + body, hashlib.sha256)
    return f"t={at},v1={digest.hexdigest()}"


def verify(secret: str, body: bytes, header: str, *, tolerance_s: int = DEFAULT_TOLERANCE_S,
           now: float | None = None) -> bool:
    """Whether `header` signs `body` with `secret`, made within `tolerance_s`."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        at = int(parts.get("t", ""))
    except ValueError:
        return False
    if abs((time.time() if now is None else now) - at) > tolerance_s:
        return False
    expected = signature(secret, body, at=at).split("v1=", 1)[1]
    return hmac.compare_digest(expected, parts.get("v1", ""))
